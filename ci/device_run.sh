#!/usr/bin/env bash
# One device-tool call: validation, then benchmarks; logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
bash ci/gpu_validate.sh 2>&1 | tee "$OUT/validate.log" | tail -60
rc=${PIPESTATUS[0]}
if [ "${KF_BENCH:-1}" = 1 ]; then
  export PYTHONPATH="/tmp/kf-site:$PWD"
  python3 benchmarks/bench_quantize.py --json "$OUT/bench.json" ${KF_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -60
fi
exit $rc
