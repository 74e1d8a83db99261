#!/usr/bin/env bash
# One device-tool call, exactly as users run a GPU node: pip-install the release's wheels
# (.carry/dist: kernelforge, the kernel wheels, the op-family plugin) and the dependency wheels the
# image lacks (.carry/deps) into a bare target, no checkout on the path, trust only the release key
# (.carry/keys/release.pub), then `cache verify`, `validate` (KF_VALIDATE=0 skips it; KF_TUNE=1 measures the card's
# tuning table on a copy of the wheel's cache and validates that copy), the example family's GPU tests from its
# own kernel wheel, and the cost of the wheel signature check. Logs go to $OUT.
#   here: see docs/release.md (build, sign, package), then copy the wheels into .carry/
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m kernelforge --version
python3 -m kernelforge cache verify 2>&1 | tee "$OUT/verify.log" | grep -v "^PROBLEM" | tail -8
rc=0
if [ "${KF_VALIDATE:-1}" = 1 ]; then
  python3 -m kernelforge validate 2>&1 | tee "$OUT/validate.log" | tail -12
  rc=${PIPESTATUS[0]}
fi
if [ "${KF_TUNE:-0}" = 1 ]; then  # measure this card's tuning table on a writable copy of the kernel wheel's cache
  card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z_')"
  rm -rf /tmp/kf-tune && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-tune && chmod -R u+w /tmp/kf-tune
  python3 -m kernelforge tune --cache /tmp/kf-tune --export "$OUT/$card.sm_90a.json" > "$OUT/tune.log" 2>&1
  tail -2 "$OUT/tune.log"
  python3 -m kernelforge validate --cache /tmp/kf-tune 2>&1 | tee "$OUT/validate_tuned.log" | tail -3
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
( cd "$REPO/examples/kernelforge-silu-quant" && python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 \
    | tee "$OUT/example_gpu.log" | tail -4 ; exit "${PIPESTATUS[0]}" )
rc_example=$?
if [ "${KF_SIG_BENCH:-1}" = 1 ]; then
  python3 "$REPO/benchmarks/diag.py" wheel-signature --site "$SITE" --runs "${KF_SIG_RUNS:-10}" 2>&1 \
    | tee "$OUT/wheel_signature.log"
fi
echo "validate rc=$rc example rc=$rc_example"
[ "$rc" = 0 ] && [ "$rc_example" = 0 ]
