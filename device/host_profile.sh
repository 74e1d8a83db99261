#!/usr/bin/env bash
# One device-tool call on the release's installed wheels (device/wheel_node.sh): where the first
# call's host time goes, for working on it, from the benchmarks' own probes. `diag.py profile`
# (cProfile of import + the first call of KF_OP, by own and by cumulative time), `bench_startup.py
# --importtime` (the modules the first call imports), `diag.py first-call` in KF_RUNS fresh
# processes (the stages), and `diag.py startup-stall --modes on,nogc` (the collections that fall in
# the first calls, and the same processes with the collector off). Logs in $OUT: profile.log,
# importtime.log, first_call.log, gc.log.
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 "$REPO/benchmarks/diag.py" profile --op "${KF_OP:-quantize_mxfp8}" --top 70 > "$OUT/profile.log" 2>&1
python3 "$REPO/benchmarks/bench_startup.py" --runs 1 --importtime --json "$OUT/bench_startup.json" \
  > "$OUT/importtime.log" 2>&1
for _ in $(seq "${KF_RUNS:-4}"); do python3 "$REPO/benchmarks/diag.py" first-call --op quantize; done > "$OUT/first_call.log" 2>&1
python3 "$REPO/benchmarks/diag.py" startup-stall --runs "${KF_RUNS:-4}" --modes on,nogc > "$OUT/gc.log" 2>&1
tail -5 "$OUT/importtime.log"; grep -E "^  (import|op |runtime|cache|first)" "$OUT/first_call.log" | sort | head -30
cat "$OUT/gc.log"
