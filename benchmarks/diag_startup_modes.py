"""Why fresh-process startup is bimodal: many runs of `diag_first_call.py`, stage by stage.

    PYTHONPATH=. python benchmarks/diag_startup_modes.py [--runs 16] [--pause 0] [--op quantize] [--cpus 3]

Runs `diag_first_call.py` in `--runs` fresh processes, one after another (with `--pause`
seconds between them, to see whether the previous process's teardown slows the next one),
and prints every process's stages as one row, sorted by the sum of the import-and-first-call
stages, so that the stage holding the extra milliseconds of the slow processes stands out, with
the process's CPU time over those stages (CPU time that grows with the wall time: slower CPU
work; wall time alone: waiting), split into user and system time, with its page faults and
involuntary context switches. `--cpus` pins the processes to those CPUs (e.g. `3` or `2,3`).
Import kernelforge from compiled bytecode (`python -m compileall kernelforge` first) unless the
source compile is what you want to see.
"""
from __future__ import annotations

import argparse
import json
import os
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
    ap.add_argument("--cpus", default="", help="comma-separated CPU numbers to pin the processes to")
    args = ap.parse_args()
    script = Path(__file__).with_name("diag_first_call.py")
    cpus = {int(c) for c in args.cpus.split(",") if c}
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    rows, cpu_ms, usage = [], [], []
    for _ in range(args.runs):
        proc = subprocess.run([sys.executable, str(script), "--op", args.op], capture_output=True, text=True, cwd="/",
                              preexec_fn=pin)
        if proc.returncode != 0:
            sys.exit(f"diag_first_call.py failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(result["stages_ms"])
        cpu_ms.append(result["first_cpu_ms"])
        usage.append(result["first_usage"])
        time.sleep(args.pause)
    names = list(rows[0])
    short = [n.split(" (")[0][:14] for n in names]
    print(f"pause {args.pause}s, cpus {args.cpus or 'any'}, {args.runs} processes, op {args.op}; ms per stage, "
          f"sorted by the first {FIRST}")
    extra = ["user", "sys", "minflt", "majflt", "invol.sw"]
    print(" ".join(f"{s:>14}" for s in ["first total", "first CPU", *extra, *short]))
    for row, cpu, use in sorted(zip(rows, cpu_ms, usage), key=lambda r: sum(list(r[0].values())[:FIRST])):
        vals = list(row.values())
        print(" ".join(f"{v:14.2f}" for v in [sum(vals[:FIRST]), cpu, *use.values(), *vals]))
    med = [statistics.median(r[n] for r in rows) for n in names]
    use_med = [statistics.median(u[k] for u in usage) for k in usage[0]]
    print(" ".join(f"{v:14.2f}" for v in [statistics.median(sum(list(r.values())[:FIRST]) for r in rows),
                                          statistics.median(cpu_ms), *use_med, *med]), "(medians)")


if __name__ == "__main__":
    main()
