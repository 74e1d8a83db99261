"""How far a tuning table's choices hold at M other than the one `kernelforge tune` timed for
their bucket (on a GPU; the tuner's own pools and timings, `kernelforge/tuner/measure.py`).

`kernelforge tune` times each M bucket at one M (`BUCKET_SAMPLE_M`) and the runtime serves the
bucket's whole range with that choice. This times every candidate of every pool at each `--m`
and compares the table's choice for that M's bucket with the fastest candidate there:

    python benchmarks/tuning_samples.py --cache DIR --table TABLE.json [--only GLOB] [--m M ...] [--log FILE]

Prints, per M, how many K-classes' choice is slower than the fastest by more than the tuner's
own margin (MIN_GAIN), with the median and the largest loss; `--log` writes one line per class
and M. The table is a table file of this card (e.g. kernelforge/data/tuning/<card>.sm_90a.json).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True, help="cache root holding the candidates")
    ap.add_argument("--table", type=Path, required=True, help="the tuning table file whose choices are checked")
    ap.add_argument("--only", default="*", help="dispatch groups matching this glob (as `kernelforge tune --only`)")
    ap.add_argument("--m", type=int, nargs="+", default=[1024, 4096, 65536], help="the M values to time")
    ap.add_argument("--log", type=Path, default=None, help="write one line per K-class and M here")
    args = ap.parse_args()

    import torch

    from kernelforge.build.tables import read_table_file
    from kernelforge.runtime.dispatch import DispatchTable
    from kernelforge.runtime.tuning import BUCKET_SAMPLE_M, TuningTable, m_bucket
    from kernelforge.tuner.measure import MIN_GAIN, candidate_pools, describe, time_pool

    try:
        table = TuningTable(read_table_file(args.table))
    except ValueError as exc:
        sys.exit(f"tuning_samples: --table: {exc}")
    if not torch.cuda.is_available():
        sys.exit("tuning_samples: needs a CUDA GPU (it times the cached kernels)")
    dev = torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(dev)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    cache = DispatchTable(args.cache)
    losses: dict[int, list[tuple[float, str]]] = {m: [] for m in args.m}
    classes = 0
    lines = []
    for pool in candidate_pools(cache, args.only, cap):
        chosen = table.choices.get(pool.group, {}).get(pool.kclass)
        if not chosen:
            continue
        classes += 1
        fns = [cache.load(c) for c in pool.cands]
        for m in args.m:
            us = time_pool(pool, fns, m, l2)
            bucket = m_bucket(m)
            pick = chosen[bucket] if bucket < len(chosen) else None
            i = pool.values.index(pick) if pick in pool.values else None
            if i is None:
                continue
            loss = us[i] / min(us)
            losses[m].append((loss, f"{pool.group} {pool.kclass}"))
            lines.append(describe(pool, m, us)
                         + f"; table (bucket {bucket}, timed at M={BUCKET_SAMPLE_M[bucket]}): {pick} x{loss:.3f}")
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")
    print(f"{torch.cuda.get_device_name(dev)}: {classes} K-classes of '{args.only}', table {args.table.name}")
    for m in args.m:
        worse = sorted((x for x in losses[m] if x[0] > 1 + MIN_GAIN), reverse=True)
        median = f"{statistics.median(x[0] for x in worse):.3f}" if worse else "-"
        top = f"; largest x{worse[0][0]:.3f} ({worse[0][1]})" if worse else ""
        bucket = m_bucket(m)
        print(f"  M={m:6d} (bucket {bucket}, timed at {BUCKET_SAMPLE_M[bucket]}): "
              f"{len(worse)} of {len(losses[m])} choices slower than the fastest by > {MIN_GAIN:.0%}, "
              f"median x{median}{top}")


if __name__ == "__main__":
    main()
