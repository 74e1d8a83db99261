"""Fresh-process runs for the diagnostics: each child prints one JSON object of milliseconds last."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def run_children(code: str, runs: int) -> list[dict[str, float]]:
    """Run `python -c code` `runs` times (cwd=/, this environment), printing each child's figures;
    then print the median of every key over the children. Exits with the child's stderr on failure."""
    results = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=os.environ.copy(), cwd="/")
        if proc.returncode != 0:
            sys.exit(f"the child failed:\n{proc.stderr[-3000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps({k: round(v, 3) for k, v in results[-1].items()}))
    print("medians (ms):")
    for key in sorted({k for r in results for k in r}):
        print(f"  {key:32} {statistics.median(r.get(key, 0.0) for r in results):7.3f}")
    return results


def cli(code: str, doc: str) -> None:
    """The diagnostics' command line: `--runs N` fresh processes of `code` (doc: the script's docstring)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="fresh processes (default 8)")
    run_children(code, ap.parse_args().runs)


# Child-side timers (prepended to a child's code): `timed(name, fn)` wraps fn so that its
# outermost calls add their milliseconds to spent[name]; wrappers given one shared `depth` list
# count only the outermost call among all of them (inner calls are part of the outer one).
TIMERS = r'''
import functools
spent = {}

def timed(name, fn, depth=None):
    depth = [0] if depth is None else depth
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[name] = spent.get(name, 0.0) + (time.perf_counter() - t) * 1e3
    return wrapper
'''
