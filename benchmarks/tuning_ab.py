"""A kernel A/B through the tuner: the best time of each K-class and sample M in two tuning tables
of one card (the committed table before a kernel change, the one `kernelforge tune` measured after
it), as ratios new / old per K-class and sample M, summarized over the op's dispatch groups.

    python benchmarks/tuning_ab.py OLD.json NEW.json [--op rmsnorm_quantize]

Both tables time every candidate of every K-class at the same sample M (`bucket_sample_m`), so the
ratio compares the two kernels at equal shapes on the same card; builds that did not change show
the tuner's noise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def ratios(old: dict, new: dict, op: str) -> dict[tuple[str, int], list[float]]:
    """(K-class, sample M) -> new best time / old best time, one value per dispatch group of `op`."""
    if old.get("bucket_sample_m") != new.get("bucket_sample_m"):
        raise ValueError("the tables sample different M per bucket: their timings do not compare")
    samples = new["bucket_sample_m"]
    out: dict[tuple[str, int], list[float]] = {}
    for group, kclasses in new["timings_us"].items():
        if group.split("|", 1)[0] != op or group not in old["timings_us"]:
            continue
        for kclass, buckets in kclasses.items():
            before = old["timings_us"][group].get(kclass)
            if before is None:
                continue
            for m, now, was in zip(samples, buckets, before):
                if now and was:
                    out.setdefault((kclass, m), []).append(min(now.values()) / min(was.values()))
    return out


def report(found: dict[tuple[str, int], list[float]]) -> list[str]:
    """One line per (K-class, sample M), then the overall count of faster and slower cells."""
    lines = ["median new/old best time per (K-class, sample M) over the dispatch groups:"]
    def order(kv):  # h1k, h2k, ..., h32k; then by sample M
        kclass, m = kv[0]
        digits = "".join(ch for ch in kclass if ch.isdigit())
        return (int(digits) if digits else 0, kclass, m)

    for (kclass, m), v in sorted(found.items(), key=order):
        lines.append(f"  {kclass:6} M={m:6}: median {statistics.median(v):.3f}  min {min(v):.3f}  "
                     f"max {max(v):.3f}  (n={len(v)})")
    every = [r for v in found.values() for r in v]
    if every:
        lines.append(f"all: median {statistics.median(every):.3f}, faster (< 0.99) in {sum(r < 0.99 for r in every)}, "
                     f"slower (> 1.01) in {sum(r > 1.01 for r in every)} of {len(every)}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--op", default="rmsnorm_quantize")
    args = ap.parse_args()
    try:
        found = ratios(json.loads(args.old.read_text()), json.loads(args.new.read_text()), args.op)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"tuning_ab: {exc}")
    if not found:
        sys.exit(f"tuning_ab: no dispatch group of {args.op} is timed in both tables")
    print("\n".join(report(found)))


if __name__ == "__main__":
    main()
