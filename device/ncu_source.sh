#!/usr/bin/env bash
# One device-tool call: where a kernel's warps stall, per SASS instruction. Each case of
# KF_NCU_CASES (benchmarks/profile_kernels.py syntax) is profiled with Nsight Compute's
# SourceCounters and WarpStateStats sections on the pip-installed wheels of KF_RELEASE (a carry
# folder, default .carry/dist); its source page (SASS, one row per instruction with its warp-state
# samples and executed instructions) is written to $OUT/sass_<n>.csv, the nth case.
# Summarize here with `python benchmarks/sass_hotspots.py sass_<n>.csv`.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
install_wheels "$REPO/${KF_RELEASE:-.carry/dist}" /tmp/kf-site || exit 3
export PYTHONPATH=/tmp/kf-site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
n=0
for case in ${KF_NCU_CASES:?KF_NCU_CASES: profile_kernels.py cases}; do
  n=$((n + 1))
  rm -f /tmp/kf-src.ncu-rep
  ncu --clock-control none --nvtx --nvtx-include "kf/" --section SourceCounters --section WarpStateStats \
    -o /tmp/kf-src python3 "$REPO/benchmarks/profile_kernels.py" "$case" > "$OUT/ncu_source_$n.log" 2>&1 || rc=1
  ncu -i /tmp/kf-src.ncu-rep --page source --csv --print-source sass > "$OUT/sass_$n.csv" 2>&1 || rc=1
  echo "$case: $(wc -l < "$OUT/sass_$n.csv") rows"
done
exit "$rc"
