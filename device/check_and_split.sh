#!/usr/bin/env bash
# One device-tool call: device/node_check.sh (verify, validate, the example family's GPU tests, the
# signature-check cost) on the release's installed wheels, then benchmarks/diag.py eager-split on the
# same install. Logs in $OUT (node_check's, and eager_split.log).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/node_check.sh"; rc=$?
source "$here/wheel_node.sh"
python3 "$REPO/benchmarks/diag.py" eager-split 2>&1 | grep -v "^ \|function calls" | tee "$OUT/eager_split.log"
exit $rc
