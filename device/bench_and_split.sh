#!/usr/bin/env bash
# One device-tool call: the benchmark command on the release's installed wheels
# (device/bench_from_wheels.sh: run.json, run.log, results/ in $OUT), then benchmarks/diag.py
# eager-split on the same install ($OUT/eager_split.log). Exit code: the benchmark's.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/bench_from_wheels.sh"; rc=$?
source "$here/wheel_node.sh"
python3 "$REPO/benchmarks/diag.py" eager-split 2>&1 | grep -v "^ \|function calls" | tee "$OUT/eager_split.log"
exit $rc
