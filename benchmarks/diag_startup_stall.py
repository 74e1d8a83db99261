"""Where the fresh-process stalls come from, op by op (run on the GPU machine).

    PYTHONPATH=. python benchmarks/diag_startup_stall.py [--runs 8] [--modes on,nogc,eager,same,sleep]

Runs the startup benchmark's children (`bench_startup.py`: torch imported, CUDA ready, then
`import kernelforge` + the first call of every op in a rotated order) and prints, per op, the
host time of the call (with the module load the loader logs), the time of the synchronize that
follows, the modules it imported, and any garbage collection that fell in it (a `gc.callbacks`
hook). Modes: `on` as the benchmark runs; `nogc` with the collector disabled; `eager` with
CUDA_MODULE_LOADING=EAGER (the driver loads every kernel of a module when the module is loaded,
not on its first launch); `same` calls the first op 8 times with distinct shapes instead; `sleep`
sleeps 20 ms before each further op (does the stall follow the clock or the count?); `prefd` grows
the process's file descriptor table (dup2 to 255) before the clock starts; `stages` times
the loader's file check, its parts, and the dynamic-linker load of each module (wall/thread CPU ms).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import OPS, SETUP  # noqa: E402

CHILD = SETUP + r"""
import gc, logging, os, re
order, mode = sys.argv[1].split(","), sys.argv[2]
if mode == "nogc":
    gc.disable()
events, started, current = [], [0.0], ["import"]
def hook(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        events.append({"op": current[0], "gen": info["generation"], "ms": 1e3 * (time.perf_counter() - started[0])})
gc.callbacks.append(hook)
loads = {}
class Loads(logging.Handler):
    def emit(self, record):
        m = re.search(r" in ([0-9.]+) ms", record.getMessage())
        if m:
            loads[current[0]] = loads.get(current[0], 0.0) + float(m.group(1))
log = logging.getLogger("kernelforge.runtime.loader")
log.setLevel(logging.INFO); log.addHandler(Loads()); log.propagate = False
stages = {}
if mode == "stages":  # time the loader's steps (wall/CPU ms): the file check and its parts, the dynamic linker
    import ctypes, os
    import kernelforge.runtime.loader as L
    from kernelforge.cache.trust import TrustedRoot
    def timed(name, fn):
        def wrapper(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                ms = 1e3 * (time.perf_counter() - t)
                if ms > 0.05 or name in ("verify", "dlopen"):
                    stages.setdefault(current[0], []).append(f"{name} {ms:.2f}/{1e3 * (time.thread_time() - c):.2f}")
        return wrapper
    L.open_verified = timed("verify", L.open_verified)
    L._check_meta = timed("meta", L._check_meta)
    TrustedRoot.open_dir = timed("open_dir", TrustedRoot.open_dir)
    TrustedRoot.open_file_at = timed("open_file", TrustedRoot.open_file_at)
    TrustedRoot._check = timed("check", TrustedRoot._check)
    os.read = timed("read", os.read)
    ctypes.CDLL = timed("dlopen", ctypes.CDLL)
def fds():
    names = [int(n) for n in os.listdir("/proc/self/fd")]
    return len(names), max(names)
if mode == "prefd":  # grow this process's descriptor table before the clock starts
    os.dup2(0, 255)
    os.close(255)
if mode == "same":
    xs = [torch.randn(128 * (i + 1), 256, device=dev, dtype=torch.bfloat16) for i in range(len(order))]
    torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
rows = []
for i, op in enumerate(order):
    current[0] = op
    n = len(sys.modules)
    if mode == "sleep" and i:
        time.sleep(0.02)
    t = time.perf_counter() if i else t0
    if mode == "same":
        kernelforge.quantize(xs[i], "mxfp8")
    else:
        CALLS[op](kernelforge)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    rows.append({"op": op, "call_ms": 1e3 * (t1 - t), "sync_ms": 1e3 * (t2 - t1), "load_ms": loads.get(op, 0.0),
                 "modules": len(sys.modules) - n, "stages": stages.get(op, []), "fds": fds(),
                 "gc": [f"gen{e['gen']} {e['ms']:.1f}" for e in events if e["op"] == op and e["ms"] > 0.5]})
print(json.dumps({"rows": rows}))
"""


def describe(r: dict, mode: str) -> str:
    """One op's row: call ms (load ms) + sync ms, open descriptors, and whatever else was recorded."""
    text = (f"{r['op'] if mode != 'same' else 'q'}: {r['call_ms']:.1f} ({r['load_ms']:.1f}) + {r['sync_ms']:.1f}"
            f" fds {r['fds'][0]} (max {r['fds'][1]})")
    if r["modules"]:
        text += f" +{r['modules']}m"
    if r["gc"]:
        text += f" {r['gc']}"
    if r["stages"]:
        text += f" [{', '.join(r['stages'])}]"
    return text


def child(order: list[str], mode: str) -> dict:
    env = os.environ.copy()
    if mode == "eager":
        env["CUDA_MODULE_LOADING"] = "EAGER"
    proc = subprocess.run([sys.executable, "-c", CHILD, ",".join(order), mode], capture_output=True, text=True,
                          cwd="/", env=env)
    if proc.returncode != 0:
        sys.exit(f"child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--modes", default="on,nogc,eager,same,sleep,prefd,stages")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        print(f"== mode {mode}: per op 'call ms (load ms) + sync ms'")
        worst = []
        for i in range(args.runs):
            first = OPS[i % len(OPS)]
            rest = [op for op in OPS if op != first]
            order = [first, *rest[i % len(rest):], *rest[:i % len(rest)]]
            rows = child(order, mode)["rows"]
            worst.append(max(range(1, len(rows)), key=lambda j: rows[j]["call_ms"] + rows[j]["sync_ms"]))
            print("  " + " | ".join(describe(r, mode) for r in rows))
        print(f"  slowest further call at position: {sorted(worst)} (median {statistics.median(worst)})")


if __name__ == "__main__":
    main()
