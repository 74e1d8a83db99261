"""Why fresh-process startup is bimodal: many runs of `diag_first_call.py`, stage by stage.

    PYTHONPATH=. python benchmarks/diag_startup_modes.py [--runs 16] [--pause 0] [--op quantize]

Runs `diag_first_call.py` in `--runs` fresh processes, one after another (with `--pause`
seconds between them, to see whether the previous process's teardown slows the next one),
and prints every process's stages as one row, sorted by the sum of the import-and-first-call
stages, so that the stage holding the extra milliseconds of the slow processes stands out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

FIRST = 7  # stages up to and including the first call's synchronize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--op", default="quantize")
    args = ap.parse_args()
    script = Path(__file__).with_name("diag_first_call.py")
    rows = []
    for _ in range(args.runs):
        proc = subprocess.run([sys.executable, str(script), "--op", args.op], capture_output=True, text=True, cwd="/")
        if proc.returncode != 0:
            sys.exit(f"diag_first_call.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1])["stages_ms"])
        time.sleep(args.pause)
    names = list(rows[0])
    short = [n.split(" (")[0][:14] for n in names]
    print(f"pause {args.pause}s, {args.runs} processes, op {args.op}; ms per stage, sorted by the first {FIRST}")
    print(" ".join(f"{s:>14}" for s in ["first total", *short]))
    for row in sorted(rows, key=lambda r: sum(list(r.values())[:FIRST])):
        vals = list(row.values())
        print(" ".join(f"{v:14.2f}" for v in [sum(vals[:FIRST]), *vals]))
    med = [statistics.median(r[n] for r in rows) for n in names]
    print(" ".join(f"{v:14.2f}" for v in [statistics.median(sum(list(r.values())[:FIRST]) for r in rows), *med]),
          "(medians)")


if __name__ == "__main__":
    main()
