"""The host side of startup, measurable without a GPU: fresh processes (torch imported first) time
`import kernelforge` + the first public-op attribute (which imports and registers the ops), then the
dispatch of a first op and of a further op (resolve, verify and dlopen the runtime library and the
module; no launch), for one or more kernelforge trees, interleaved.

    python benchmarks/bench_import.py [--runs N] [--cache DIR] [TREE ...]   (default TREE: this checkout)

TREE is a directory holding a `kernelforge/` package (e.g. a `git worktree` of an older commit);
each process runs from a scratch directory with only TREE on its path. Medians and quartiles,
in ms. The figures on the GPU machine (`benchmarks/bench_startup.py`) include the kernel launch
and CUDA's module load, which this does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVICE = "NVIDIA H100 80GB HBM3"  # whose tuning table is read, as on that machine

CHILD = r"""
import json, sys, time
import torch
t0 = time.perf_counter()
import kernelforge
kernelforge.quantize
t1 = time.perf_counter()
import kernelforge.ops.launch as c
table = c.dispatch_table()
table.resolve("quantize", {"dtype": "bfloat16", "format": "mxfp8", "layout": "linear", "scale_mode": "floor"},
              (9, 0), 256, 32, 1 << 20, 512, 128, sys.argv[1])
t2 = time.perf_counter()
table.resolve("rmsnorm_quantize", {"dtype": "bfloat16", "format": "mxfp8", "layout": "linear", "scale_mode": "floor",
              "residual": "none"}, (9, 0), 1024, 32, 1 << 20, 2048, 128, sys.argv[1])
t3 = time.perf_counter()
print(json.dumps([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]))
"""
STAGES = ("import + ops registered", "first op: resolve + load", "further op: resolve + load", "total")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="*", default=[str(REPO)])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--cache", default=str(REPO / "cache"), help="a cache holding sm_90a builds of both ops")
    args = ap.parse_args()
    results: dict[str, list[list[float]]] = {t: [] for t in args.trees}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.runs):
            for tree in args.trees:
                env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), KERNELFORGE_CACHE_DIR=args.cache,
                           KERNELFORGE_RECORD_USAGE="0")
                out = subprocess.run([sys.executable, "-c", CHILD, DEVICE], cwd=scratch, env=env,
                                     capture_output=True, text=True, check=True).stdout
                stages = json.loads(out.strip().splitlines()[-1])
                results[tree].append([*stages, sum(stages)])
    print(f"{args.runs} fresh processes per tree, interleaved; ms: median [q1, q3]")
    print(f"| stage | {' | '.join(args.trees)} |")
    print(f"|---|{'---:|' * len(args.trees)}")
    for i, stage in enumerate(STAGES):
        cells = []
        for tree in args.trees:
            v = [r[i] for r in results[tree]]
            q1, _, q3 = statistics.quantiles(v, n=4)
            cells.append(f"{statistics.median(v):.2f} [{q1:.2f}, {q3:.2f}]")
        print(f"| {stage} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
