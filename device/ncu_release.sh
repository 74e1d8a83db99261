#!/usr/bin/env bash
# One device-tool call: Nsight Compute counters of kernel cases (KF_NCU_CASES, benchmarks/
# profile_kernels.py syntax) on pip-installed release wheels, one release after another
# (KF_RELEASES: carry folders, as for wheel_ab.sh). Per release and case: GPU time, DRAM bytes read
# and written, achieved occupancy, registers, grid, warp instructions and the warp stall reasons
# that benchmarks/evidence.py reports (its command line: one ncu process per case, so each line
# names its case). Writes $OUT/ncu_<release>.txt, the lines it prints.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
read -r -a releases <<< "${KF_RELEASES:-.carry/dist}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
for rel in "${releases[@]}"; do
  name="$(basename "$rel")"
  install_wheels "$REPO/$rel" "/tmp/kf-site-$name" || exit 3
  # shellcheck disable=SC2086  # KF_NCU_CASES: several cases
  PYTHONPATH="/tmp/kf-site-$name" python3 "$REPO/benchmarks/evidence.py" --label "$name" \
    ${KF_NCU_CASES:?KF_NCU_CASES: profile_kernels.py cases} 2>&1 | tee "$OUT/ncu_$name.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
exit "$rc"
