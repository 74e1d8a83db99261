#!/usr/bin/env bash
# One device-tool call: a device script that runs on the release's installed wheels (node_check.sh or
# bench_from_wheels.sh), then benchmarks/diag.py eager-split on the same install ($OUT/eager_split.log).
# Usage: device/then_eager_split.sh node_check.sh|bench_from_wheels.sh. Exit code: the script's.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/$1"; rc=$?
source "$here/wheel_node.sh"
python3 "$REPO/benchmarks/diag.py" eager-split 2>&1 | grep -v "^ \|function calls" | tee "$OUT/eager_split.log"
exit $rc
