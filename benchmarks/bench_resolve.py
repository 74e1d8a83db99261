"""CPU cost of choosing one call's build in a fresh process: the dispatch group's candidates from
the cache's indexes, then the tuning table's (or the heuristic's) pick, no kernel loaded. This is
the "resolve" stage of a first call (`benchmarks/diag.py first-call`), measurable without a GPU on
any cache or installed kernel wheel, e.g. to A/B two kernelforge trees on the same wheel:

    PYTHONPATH=TREE python benchmarks/bench_resolve.py CACHE_DIR [--runs 6] [--device NAME]

Each run is a child process (the caches of a process must start cold); prints the median ms of
the candidates stage and of the pick, and how the pick was decided.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
from kernelforge.runtime import dispatch
from kernelforge.runtime.layer_reader import first_class
root, op, coords, k, m, device = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6]
t0 = time.perf_counter()
table = dispatch.DispatchTable(root)
cands = table.candidates(op, coords, (9, 0))
accepting = [c for c in cands if c.accepts(k, 32, 256, 2 * k, m)]
if not accepting:
    raise SystemExit(f"no cached {op} build for {coords} accepts K = {k} in {root}")
pool = first_class(accepting)
t1 = time.perf_counter()
chosen, how = table.pick_explained(op, coords, pool, m, device)
t2 = time.perf_counter()
print(json.dumps({"candidates_ms": (t1 - t0) * 1e3, "pick_ms": (t2 - t1) * 1e3, "chosen": chosen.entry["name"],
                  "how": how}))
"""

QUANTIZE_MXFP8 = {"format": "mxfp8", "scale_mode": "floor", "layout": "swizzled", "dtype": "bfloat16"}


def measure(root: str, runs: int, device: str, op: str = "quantize", coords: dict | None = None,
            k: int = 4096, m: int = 4096) -> dict:
    """Median ms of each stage over `runs` fresh processes, and the last run's choice."""
    rows = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", CHILD, root, op, json.dumps(coords or QUANTIZE_MXFP8), str(k),
                              str(m), device], capture_output=True, text=True, env=os.environ.copy(), timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"bench_resolve: the child failed: {(out.stderr or out.stdout).strip()[-400:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"runs": runs, "candidates_ms": statistics.median(r["candidates_ms"] for r in rows),
            "pick_ms": statistics.median(r["pick_ms"] for r in rows), "chosen": rows[-1]["chosen"],
            "how": rows[-1]["how"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", help="a cache root (an installed kernel wheel's cache/ folder too)")
    ap.add_argument("--runs", type=int, default=6, help="fresh processes (default 6)")
    ap.add_argument("--device", default="NVIDIA H100 80GB HBM3", help="the GPU name whose tuning tables apply")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit(f"--runs: expected a positive number of processes, got {args.runs}")
    r = measure(args.cache, args.runs, args.device)
    print(f"quantize mxfp8 4096x4096, {r['runs']} fresh processes, median: candidates {r['candidates_ms']:.2f} ms, "
          f"pick {r['pick_ms']:.2f} ms; {r['chosen']}: {r['how']}")


if __name__ == "__main__":
    main()
