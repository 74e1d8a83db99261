#!/usr/bin/env bash
# One device-tool call on a machine with 2 or more GPUs (nvidia-h100-x2 / nvidia-h200-x2):
# `kernelforge validate`, whose GPU tests include kernelforge/validation/test_multi_gpu.py wherever
# 2+ CUDA devices are visible, with one line per test in $OUT/validate.log.
# Usage: device/device_multi_gpu.sh [CACHE_DIR]  (default: $KERNELFORGE_CACHE_DIR, else cache/)
# Needs: an sm_90a cache and .whl/ (the apache-tvm-ffi wheel), as device/gpu_validate.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
# validate runs pytest -q; ADDOPTS come first, so two -v leave one: a line per test.
export PYTHONUNBUFFERED=1 PYTEST_ADDOPTS="-v -v ${PYTEST_ADDOPTS:-}"
nvidia-smi -L 2>&1 | tee "$OUT/gpus.txt"
bash device/gpu_validate.sh "${1:-}" 2>&1 | tee "$OUT/validate.log" | grep -v ' PASSED' | tail -60
rc=${PIPESTATUS[0]}
grep -E 'test_multi_gpu.py::' "$OUT/validate.log" > "$OUT/multi_gpu_tests.txt" || true
echo "multi-GPU tests: $(grep -c ' PASSED' "$OUT/multi_gpu_tests.txt") passed of $(wc -l < "$OUT/multi_gpu_tests.txt")"
exit "$rc"
