#!/usr/bin/env bash
# One device-tool call: validation, then benchmarks; logs go to $OUT when set.
# KF_VALIDATE=0 skips validation, KF_BENCH=0 the benchmarks; KF_BENCHES picks them (quantize fused).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
rc=0
if [ "${KF_VALIDATE:-1}" = 1 ]; then
  bash device/gpu_validate.sh 2>&1 | tee "$OUT/validate.log" | tail -60
  rc=${PIPESTATUS[0]}
elif compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kf-site .whl/*.whl
fi
if [ "${KF_BENCH:-1}" = 1 ]; then
  export PYTHONPATH="/tmp/kf-site:$PWD"
  for b in ${KF_BENCHES:-quantize fused}; do
    python3 "benchmarks/bench_$b.py" --json "$OUT/bench_$b.json" ${KF_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_$b.log" | tail -60
  done
fi
exit $rc
