"""A/B of two kernelforge trees on one GPU: first-call and per-call host costs, interleaved.

Each round runs, for tree A then tree B, one fresh process timing `import kernelforge` + the
first call of every op (bench_startup's STARTUP child, the ops in a rotated order) and one
timing the host cost per call (bench_startup's HOST child). Interleaving makes drift of the
machine (other tenants, clocks) hit both trees alike; medians over the rounds are printed.

    PYTHONPATH=<site-packages with tvm_ffi> python benchmarks/bench_host_ab.py A_DIR B_DIR \
        [--rounds 8] [--json ab.json]

A_DIR and B_DIR are directories holding a `kernelforge` package (e.g. the checkout and an
older tree from `git archive`); the cache is $KERNELFORGE_CACHE_DIR for both.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import bench_startup as bs

HERE = Path(__file__).resolve().parent


def _child(tree: str, code: str, *args: str) -> dict:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd="/")
    return bs._last_json(proc, f"child of {tree}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", type=Path, default=Path("bench_host_ab.json"))
    args = ap.parse_args()
    bs._needs_gpu()
    trees = {"A": args.a, "B": args.b}
    samples: dict[str, list[dict]] = {"A": [], "B": []}
    for r in range(args.rounds):
        order = list(bs.OPS[r % len(bs.OPS):] + bs.OPS[:r % len(bs.OPS)])
        for name, tree in trees.items():
            start = _child(tree, bs.STARTUP, ",".join(order))
            host = _child(tree, bs.HOST, str(HERE))
            samples[name].append({"first_ms": start["first_ms"], "further_ms": sum(start["further_ms"].values()),
                                  **host, "device": start["device"]})
    keys = [k for k in samples["A"][0] if k != "device"]
    med = {n: {k: statistics.median(s[k] for s in samples[n]) for k in keys} for n in trees}
    print(f"device: {samples['A'][0]['device']}; median of {args.rounds} interleaved rounds")
    print(f"A = {args.a}\nB = {args.b}\n")
    print("| figure | A | B | B - A |\n|---|---:|---:|---:|")
    for k in keys:
        print(f"| {k} | {med['A'][k]:.2f} | {med['B'][k]:.2f} | {med['B'][k] - med['A'][k]:+.2f} |")
    args.json.write_text(json.dumps({"trees": trees, "median": med, "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
