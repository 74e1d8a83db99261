#!/usr/bin/env bash
# One device-tool call: the benchmark command (benchmarks/run.py) exactly as a user's node runs the
# kernels: the release's wheels of .carry/dist and the dependency wheels of .carry/deps pip-installed
# into a bare target, only the release key trusted (.carry/keys/release.pub), no checkout on the path
# (the startup section's fresh processes then measure the first call from the installed kernel wheel).
# Writes $OUT/run.json, $OUT/run.log, $OUT/results/ (plots + run-<date>-<device>.md).
# KF_BENCH_ARGS adds run.py flags (e.g. --quick, --only quantize dual). Exit code: run.py's.
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
# The same builds as a plain cache directory, for the first call from a wheel against a directory.
rm -rf /tmp/kf-cachedir && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/run.py" --out-dir "$OUT/results" --json "$OUT/run.json" \
  --startup-cache-dir /tmp/kf-cachedir ${KF_BENCH_ARGS:-} 2>&1 \
  | tee "$OUT/run.log" | tail -40
exit "${PIPESTATUS[0]}"
