#!/usr/bin/env bash
# One device-tool call: the benchmark command (benchmarks/run.py) exactly as a user's node runs the
# kernels: the release's wheels of .carry/dist and the dependency wheels of .carry/deps pip-installed
# into a bare target, only the release key trusted (.carry/keys/release.pub), no checkout on the path
# (the startup section's fresh processes then measure the first call from the installed kernel wheel).
# Writes $OUT/run.json, $OUT/run.log, $OUT/results/ (plots + run-<date>-<device>.md).
# KF_BENCH_ARGS adds run.py flags (e.g. --quick, --only quantize dual). Exit code: run.py's.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
SITE=/tmp/kf-site
rm -rf "$SITE"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$SITE" \
  "$REPO"/.carry/deps/*.whl "$REPO"/.carry/dist/*.whl || exit 3
cd /tmp
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub"
unset KERNELFORGE_CACHE_DIR KERNELFORGE_ALLOW_UNSIGNED
# The same builds as a plain cache directory, for the first call from a wheel against a directory.
rm -rf /tmp/kf-cachedir && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/run.py" --out-dir "$OUT/results" --json "$OUT/run.json" \
  --startup-cache-dir /tmp/kf-cachedir ${KF_BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/run.log" | tail -40
exit "${PIPESTATUS[0]}"
