#!/usr/bin/env bash
# One device-tool call on the release's installed wheels (device/wheel_node.sh): where a fresh
# process's import + first call goes on this host. `diag.py startup-modes` from the default layers
# (the kernel wheel) and from a directory copy of the wheel's cache (every process's stages with its
# CPU time, page faults and context switches), then `bench_startup.py --importtime` (the medians and
# the modules the first call imports, by cumulative import time). Logs in $OUT: modes_layers.log,
# modes_dir.log, importtime.log. KF_RUNS: processes per mode (default 16).
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, platform; print(sys.version.split()[0], platform.processor() or platform.machine())"
grep -m1 "model name" /proc/cpuinfo
rm -rf /tmp/kf-cachedir && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/diag.py" startup-modes --runs "${KF_RUNS:-16}" > "$OUT/modes_layers.log" 2>&1
KERNELFORGE_CACHE_DIR=/tmp/kf-cachedir python3 "$REPO/benchmarks/diag.py" startup-modes --runs "${KF_RUNS:-16}" \
  > "$OUT/modes_dir.log" 2>&1
python3 "$REPO/benchmarks/bench_startup.py" --runs 3 --importtime > "$OUT/importtime.log" 2>&1
tail -n 2 "$OUT/modes_layers.log" "$OUT/modes_dir.log"; head -c 3000 "$OUT/importtime.log"
