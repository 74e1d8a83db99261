#!/usr/bin/env bash
# One device-tool call: the benchmark command (benchmarks/run.py) on the checkout's cache.
# Needs: cache/ (sm_90a builds) and .whl/ (the apache-tvm-ffi wheel, installed by device/device_env.sh).
# Writes $OUT/run.json, $OUT/run.log and $OUT/results/ (PNG plots + run-<date>-<device>.md); redraw the
# report and plots from it with `python benchmarks/run.py --plots-from run.json`.
# KF_BENCH_ARGS adds run.py flags (e.g. --quick, --only dual rht). Exit code: run.py's (1: a section failed).
set -uo pipefail
cd "$(dirname "$0")/.."
source device/device_env.sh
PYTHONPATH="/tmp/kf-site:$PWD" KERNELFORGE_CACHE_DIR="$PWD/cache" \
  python3 benchmarks/run.py --out-dir "$OUT/results" --json "$OUT/run.json" --no-append ${KF_BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
