#!/usr/bin/env bash
# One device-tool call: re-measure part of this card's tuning table on a pip-installed release
# ($KF_WHEELS, default .carry/dist) after one op family's kernel changed. `kernelforge tune --only
# "$KF_TUNE_ONLY"` (default 'quantize|*') `--update` the card's committed table
# (kernelforge/data/tuning/<card>.sm_90a.json) runs on a writable copy of the kernel wheel's cache:
# the dispatch groups it measured replace theirs, the table's other choices are kept; then
# `validate` runs on that copy with the merged table. $OUT/<card>.sm_90a.json is the table to commit.
# KF_UPDATE=0: measure the card's whole table instead (every tuned op; no --update, nothing kept):
# for a committed table of other M buckets, or a new card.
# KF_BENCH_ARGS (e.g. "--only fused"): then `benchmarks/run.py $KF_BENCH_ARGS` on that copy, so on
# the kernels of the wheel served with the merged table ($OUT/run.json, $OUT/run.log).
#   here: the release's wheels in .carry/ (docs/release.md); afterwards commit the table and repackage
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
slug="$(echo "$card" | tr 'A-Z ' 'a-z_')"
echo "card: $card"
rm -rf /tmp/kf-tune && cp -r "$SITE"/kernelforge_kernels_sm90a/cache /tmp/kf-tune && chmod -R u+w /tmp/kf-tune
scope=(--only "${KF_TUNE_ONLY:-quantize|*}" --update "$REPO/kernelforge/data/tuning/$slug.sm_90a.json")
[ "${KF_UPDATE:-1}" = 0 ] && scope=()
python3 -m kernelforge tune --cache /tmp/kf-tune "${scope[@]}" --export "$OUT/$slug.sm_90a.json" \
  > "$OUT/tune.log" 2>&1 || { tail -5 "$OUT/tune.log"; exit 1; }
tail -3 "$OUT/tune.log"
python3 -m kernelforge validate --cache /tmp/kf-tune 2>&1 | tee "$OUT/validate_tuned.log" | tail -1
rc="${PIPESTATUS[0]}"
if [ -n "${KF_BENCH_ARGS:-}" ]; then
  # shellcheck disable=SC2086  # KF_BENCH_ARGS: several run.py flags
  KERNELFORGE_CACHE_DIR=/tmp/kf-tune python3 "$REPO/benchmarks/run.py" $KF_BENCH_ARGS --out-dir "$OUT/results" \
    --json "$OUT/run.json" > "$OUT/run.log" 2>&1 || { echo "run.py failed"; rc=1; }
  tail -3 "$OUT/run.log"
fi
exit "$rc"
