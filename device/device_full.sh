#!/usr/bin/env bash
# One device-tool call for a tree's full set of GPU figures: tune the sm_90a cache (the table goes into the
# cache and to $OUT/<device>.sm_90a.json for the checkout), GPU-validate with that table, the
# startup diagnosis (diag.py startup-modes + diag.py profile), then the benchmark
# command (device/device_bench.sh). Needs cache/ (sm_90a builds of this tree) and .whl/.
# KF_STEPS picks steps (default: "tune validate diag bench").
set -uo pipefail
cd "$(dirname "$0")/.."
source device/device_env.sh
export KERNELFORGE_CACHE_DIR="$PWD/cache"
rc=0
for step in ${KF_STEPS:-tune validate diag bench}; do
  case "$step" in
    tune) device="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z_')"  # the committed tables' naming
          PYTHONPATH="/tmp/kf-site:$PWD" python3 -m kernelforge tune --export "$OUT/$device.sm_90a.json" \
            > "$OUT/tune.log" 2>&1 || rc=1; tail -1 "$OUT/tune.log" ;;
    validate) bash device/gpu_validate.sh > "$OUT/validate.log" 2>&1 || rc=1; tail -1 "$OUT/validate.log" ;;
    diag) PYTHONPATH="/tmp/kf-site:$PWD" python3 benchmarks/diag.py startup-modes --runs 16 > "$OUT/startup_diag.log" 2>&1 || rc=1
          PYTHONPATH="/tmp/kf-site:$PWD" python3 benchmarks/diag.py profile > "$OUT/first_call_profile.log" 2>&1 || rc=1 ;;
    bench) bash device/device_bench.sh > /dev/null 2>&1 || rc=1; tail -3 "$OUT/run.log"
           tar -czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results" ;;
  esac
done
exit $rc
