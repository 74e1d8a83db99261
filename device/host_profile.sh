#!/usr/bin/env bash
# One device-tool call on the release's installed wheels (device/wheel_node.sh): where the first
# call's host time goes, for working on it. `diag.py profile` (cProfile of import + the first call
# of KF_OP, by own and by cumulative time), `-X importtime` of the same (every module the first call
# imports, third-party ones included), and `diag.py first-call` in KF_RUNS fresh processes with the
# garbage collections that fell into them. Logs in $OUT: profile.log, importtime.log, first_call.log.
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
OP="${KF_OP:-quantize_mxfp8}"
python3 "$REPO/benchmarks/diag.py" profile --op "$OP" --top 70 > "$OUT/profile.log" 2>&1
python3 - "$OP" > "$OUT/importtime.log" 2>&1 <<PY
import subprocess, sys
sys.path.insert(0, "$REPO/benchmarks")
from bench_startup import SETUP
code = SETUP + "import kernelforge\nCALLS[sys.argv[1]](kernelforge)\ntorch.cuda.synchronize()\n"
proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code, sys.argv[1]], capture_output=True, text=True, cwd="/")
lines = proc.stderr.splitlines()
start = max(i for i, l in enumerate(lines) if l.rstrip().endswith("| torch")) + 1
rows = []
for l in lines[start:]:
    p = l[len("import time:"):].split("|")
    if len(p) == 3 and p[0].strip().isdigit():
        rows.append((int(p[0]), int(p[1]), p[2].rstrip()))
print("modules", len(rows), "self us total", sum(r[0] for r in rows))
for r in rows:
    print(f"{r[0]:8} {r[1]:8} {r[2]}")
PY
for _ in $(seq "${KF_RUNS:-4}"); do python3 "$REPO/benchmarks/diag.py" first-call --op quantize; done > "$OUT/first_call.log" 2>&1
head -3 "$OUT/importtime.log"; grep -E "^  (import|op |runtime|cache|first)" "$OUT/first_call.log" | sort | head -30
for _ in 1 2 3 4; do python3 - "$OP" <<PY
import gc, sys, time
sys.path.insert(0, "$REPO/benchmarks")
from bench_startup import SETUP
exec(SETUP)
ev, t = [], [0.0]
gc.callbacks.append(lambda ph, info: t.__setitem__(0, time.perf_counter()) if ph == "start" else ev.append((info["generation"], 1e3 * (time.perf_counter() - t[0]))))
t0 = time.perf_counter()
import kernelforge
CALLS[sys.argv[1]](kernelforge)
torch.cuda.synchronize()
print(f"gc: first call {1e3 * (time.perf_counter() - t0):.2f} ms, collections {[f'gen{g} {ms:.2f}' for g, ms in ev]}")
PY
done 2>&1 | tee "$OUT/gc.log"
