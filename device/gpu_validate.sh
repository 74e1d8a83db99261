#!/usr/bin/env bash
# GPU runner: with only the runtime installed (torch + apache-tvm-ffi), verify the cache and run
# the GPU tests against it. Usage: device/gpu_validate.sh [CACHE_DIR]   (default: the checkout's cache/)
# Wheels in .whl/ (e.g. apache-tvm-ffi for a machine without a registry) are installed first.
# Exit code: kernelforge validate's (0 validated, 1 a check failed, 2 no GPU / no cache / no
# kernel for the GPU's arch), or that of the first set-up step that failed.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kf-site .whl/*.whl
  export PYTHONPATH="/tmp/kf-site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
export KERNELFORGE_CACHE_DIR="${1:-${KERNELFORGE_CACHE_DIR:-$PWD/cache}}"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
# No GPU is validate's to report (one line, exit 2), so this line does not ask torch for one.
python3 -c "import torch, tvm_ffi; print('torch', torch.__version__, 'tvm_ffi', tvm_ffi.__version__, 'cuda available:', torch.cuda.is_available())"
python3 -m kernelforge cache stats
exec python3 -m kernelforge validate
