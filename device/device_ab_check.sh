#!/usr/bin/env bash
# One device-tool call after a refactor of the runtime/ops: validate the checkout's cache with the
# current tree, then time startup and per-call host cost (benchmarks/bench_startup.py) for the
# current tree and for an older one carried in .carry/old (an A/B on the same machine),
# and record where `import tvm_ffi` spends its time. Logs go to $OUT.
# Needs: cache/ (sm_90a builds), .whl/ (the apache-tvm-ffi wheel), optionally .carry/old/kernelforge.
# KF_VALIDATE=0 skips validation, KF_EXAMPLE=1 runs the example family's GPU tests and benchmark,
# KF_AB=1 runs benchmarks/bench_host_ab.py (.carry/old against this tree, interleaved, KF_ROUNDS rounds),
# KF_TREES="new old" runs bench_startup per tree (old: .carry/old), KF_RUNS the processes per op,
# KF_IMPORTTIME=1 profiles import + first call, KF_DIAG=1 times output allocation (diag.py alloc).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Byte-compiled like a user's install (pip compiles on install): a process that compiles every
# imported .py on its own is not what startup figures should quote.
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/kf-site .whl/*.whl
python3 -m compileall -q kernelforge $( [ -d .carry/old/kernelforge ] && echo .carry/old/kernelforge ) >/dev/null || true
{ python3 --version; env | grep -E '^PYTHON' || true; } | tee "$OUT/env.txt"
rc=0
if [ "${KF_VALIDATE:-1}" = 1 ]; then
  bash device/gpu_validate.sh 2>&1 | tee "$OUT/validate.log" | tail -25
  rc=${PIPESTATUS[0]}
fi
if [ "${KF_EXAMPLE:-0}" = 1 ]; then  # the example op family (examples/kernelforge-silu-quant), from PYTHONPATH
  ex=examples/kernelforge-silu-quant
  PYTHONPATH="/tmp/kf-site:$PWD:$PWD/$ex" KERNELFORGE_CACHE_DIR="$PWD/cache" \
    python3 -m pytest -q -p no:cacheprovider -m gpu "$ex/tests" 2>&1 | tee "$OUT/example_gpu_tests.log" | tail -15
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  PYTHONPATH="/tmp/kf-site:$PWD:$PWD/$ex" KERNELFORGE_CACHE_DIR="$PWD/cache" \
    python3 "$ex/benchmarks/bench_silu_quant.py" --baseline --json "$OUT/bench_silu_quant.json" 2>&1 \
    | tee "$OUT/bench_silu_quant.log" | tail -25
fi
if [ "${KF_AB:-0}" = 1 ] && [ -d .carry/old/kernelforge ]; then  # interleaved A/B: A = .carry/old, B = this tree
  PYTHONPATH=/tmp/kf-site KERNELFORGE_CACHE_DIR="$PWD/cache" python3 benchmarks/bench_host_ab.py \
    "$PWD/.carry/old" "$PWD" --rounds "${KF_ROUNDS:-8}" --json "$OUT/bench_host_ab.json" 2>&1 \
    | tee "$OUT/bench_host_ab.log" | tail -25
fi
trees="${KF_TREES:-}"; [ -d .carry/old/kernelforge ] || trees="${trees:+new}"
for tree in $trees; do
  case $tree in old) src="$PWD/.carry/old" ;; *) src="$PWD" ;; esac
  PYTHONPATH="/tmp/kf-site:$src" KERNELFORGE_CACHE_DIR="$PWD/cache" \
    python3 benchmarks/bench_startup.py --runs "${KF_RUNS:-5}" --json "$OUT/startup_$tree.json" 2>&1 \
    | tee "$OUT/startup_$tree.log" | tail -25
done
if [ "${KF_IMPORTTIME:-0}" = 1 ]; then  # where import + first call spend their time (after torch and CUDA)
  PYTHONPATH=/tmp/kf-site python3 -X importtime -c "import torch; torch.zeros(1, device='cuda'); import tvm_ffi" \
    2> "$OUT/importtime_tvm_ffi.txt"
  PYTHONPATH="/tmp/kf-site:$PWD" KERNELFORGE_CACHE_DIR="$PWD/cache" python3 -X importtime -c "
import torch; x = torch.randn(128, 256, device='cuda', dtype=torch.bfloat16); torch.cuda.synchronize()
import kernelforge; kernelforge.quantize(x, 'mxfp8'); torch.cuda.synchronize()" 2> "$OUT/importtime_first_call.txt"
  PYTHONPATH="/tmp/kf-site:$PWD" KERNELFORGE_CACHE_DIR="$PWD/cache" python3 -c "
import cProfile, pstats, torch; x = torch.randn(128, 256, device='cuda', dtype=torch.bfloat16); torch.cuda.synchronize()
p = cProfile.Profile(); p.enable()
import kernelforge; kernelforge.quantize(x, 'mxfp8'); torch.cuda.synchronize()
p.disable(); pstats.Stats(p).sort_stats('cumulative').print_stats(60)" > "$OUT/profile_first_call.txt" 2>&1
fi
if [ "${KF_DIAG:-0}" = 1 ]; then  # host cost of the ways to allocate an op's outputs
  PYTHONPATH="/tmp/kf-site:$PWD" python3 benchmarks/diag.py alloc 2>&1 | tee "$OUT/diag_alloc.log" | tail -8
fi
exit $rc
