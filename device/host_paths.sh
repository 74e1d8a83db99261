#!/usr/bin/env bash
# One device-tool call on the release's installed wheels (device/wheel_node.sh): where the host time
# of the eager and first calls goes. benchmarks/diag.py eager-split (an eager call against its
# graph-replayed time, plain and grouped), diag.py alloc (the ways to make an allocating call's
# outputs), then run.py's startup and host sections with the first call from the kernel wheel against
# a directory of the same builds, and cProfile / stage times of the first call both ways. Logs in $OUT:
# eager_split.log, alloc.log, run.log, run.json, profile_layers.log, profile_dir.log, stages.log.
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 "$REPO/benchmarks/diag.py" eager-split 2>&1 | tee "$OUT/eager_split.log"
python3 "$REPO/benchmarks/diag.py" alloc 2>&1 | tee "$OUT/alloc.log"
rm -rf /tmp/kf-cachedir && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/run.py" --only startup host --no-append --out-dir "$OUT/results" --json "$OUT/run.json" \
  --startup-cache-dir /tmp/kf-cachedir ${KF_BENCH_ARGS:-} 2>&1 | tee "$OUT/run.log" | tail -30
# Where a fresh process's first call goes, from the wheel layers and from the directory (cProfile,
# then the runtime's stages over several processes).
python3 "$REPO/benchmarks/diag.py" profile --op quantize_mxfp8 --top 35 > "$OUT/profile_layers.log" 2>&1
KERNELFORGE_CACHE_DIR=/tmp/kf-cachedir python3 "$REPO/benchmarks/diag.py" profile --op quantize_mxfp8 --top 35 \
  > "$OUT/profile_dir.log" 2>&1
{ python3 "$REPO/benchmarks/diag.py" stages --runs 8
  KERNELFORGE_CACHE_DIR=/tmp/kf-cachedir python3 "$REPO/benchmarks/diag.py" stages --runs 8; } > "$OUT/stages.log" 2>&1
tail -4 "$OUT/stages.log"
