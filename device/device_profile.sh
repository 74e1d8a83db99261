#!/usr/bin/env bash
# One device-tool call after a runtime or kernel change: validate the checkout's cache, time import +
# first call stage by stage (benchmarks/diag.py first-call, KF_DIAG_RUNS processes per op), and profile
# the kernels named in KF_NCU_CASES with Nsight Compute (benchmarks/profile_kernels.py case syntax).
# Everything lands in $OUT/device_profile.tar.gz (one file: the device tool returns a few files only).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kf-out}"; W=$(mktemp -d); mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/kf-site .whl/*.whl
python3 -m compileall -q kernelforge >/dev/null || true
rc=0
if [ "${KF_VALIDATE:-1}" = 1 ]; then
  bash device/gpu_validate.sh > "$W/validate.log" 2>&1; rc=$?
  tail -3 "$W/validate.log"
fi
export PYTHONPATH="/tmp/kf-site:$PWD" KERNELFORGE_CACHE_DIR="$PWD/cache"
for _ in $(seq "${KF_DIAG_RUNS:-3}"); do
  for op in quantize dual rht rmsnorm; do python3 benchmarks/diag.py first-call --op "$op"; done
done > "$W/diag_first_call.log" 2>&1
grep -c '^{' "$W/diag_first_call.log" | sed 's/^/diag runs: /'
if [ -n "${KF_NCU_CASES:-}" ] && command -v ncu >/dev/null; then
  # shellcheck disable=SC2086
  ncu --clock-control none --nvtx --nvtx-include "kf/" --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
      python3 benchmarks/profile_kernels.py $KF_NCU_CASES > "$W/ncu.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Warp" "$W/ncu.txt" | head -60
fi
tar -C "$W" -czf "$OUT/device_profile.tar.gz" .
exit $rc
