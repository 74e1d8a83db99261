#!/usr/bin/env bash
# One device-tool call, exactly how users run kernelforge on a GPU node: install the kernelforge
# wheel, the per-arch kernel wheel (dist/) and the runtime dependencies (.whl/) into a bare target
# with no checkout on the path, validate from there, then time the load path.
#   build here:  kernelforge build --arch sm_90a && kernelforge package --arch sm_90a --out dist
#                pip wheel --no-deps -w dist .     (and the runtime wheels into .whl/, see the README)
# Logs go to $OUT when set.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
SITE=/tmp/kf-site
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
  "$REPO"/.whl/*.whl "$REPO"/dist/*.whl || exit 3
cd /tmp                      # the installed package, never the checkout
export PYTHONPATH="$SITE"
unset KERNELFORGE_CACHE_DIR
python3 -c 'import kernelforge, sys; print("kernelforge from", kernelforge.__file__)'
python3 -m kernelforge cache stats 2>&1 | tee "$OUT/stats.log" | head -30
if [ "${KF_TUNE:-0}" = 1 ]; then  # re-measure the tuning table on a writable copy of the wheel's cache
  rm -rf /tmp/kf-tune && cp -r "$SITE"/kernelforge_kernels_*/cache /tmp/kf-tune && chmod -R u+w /tmp/kf-tune
  python3 -m kernelforge tune --cache /tmp/kf-tune --export "$OUT/tuning.json" 2>&1 | tail -5
fi
python3 -m kernelforge validate 2>&1 | tee "$OUT/validate.log" | tail -40
rc=${PIPESTATUS[0]}
if [ "${KF_BENCH_LOAD:-1}" = 1 ]; then
  python3 "$REPO/benchmarks/bench_load.py" --runs "${KF_LOAD_RUNS:-9}" --json "$OUT/bench_load.json" 2>&1 \
    | tee "$OUT/bench_load.log"
fi
exit $rc
