#!/usr/bin/env bash
# One device-tool call: two releases' wheels on the same GPU, as users' nodes run them. Release A
# (.carry/dist) and release B ($KF_WHEELS_B, default .carry/dist-b: the same wheels with a rebuilt
# kernel wheel) are each pip-installed into a bare target (device/wheel_node.sh), only the release
# key trusted. `validate` runs on B (KF_VALIDATE=0 skips it), then KF_ROUNDS (default 3) interleaved
# rounds of `benchmarks/run.py --only $KF_SECTIONS --no-evidence` per release, and the comparison
# table (benchmarks/kernel_ab_table.py). The card's name leads the log; $OUT/ab holds every run.json.
#   here: kernelforge build; kernelforge package --dist kernelforge --sign-key KEY --out .carry/dist-b;
#         copy the other wheels of .carry/dist into .carry/dist-b
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT/ab"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
for tree in a b; do
  wheels="$REPO/.carry/dist"; [ "$tree" = b ] && wheels="${KF_WHEELS_B:-$REPO/.carry/dist-b}"
  (KF_WHEELS="$wheels" SITE="/tmp/kf-site-$tree" source "$HERE/wheel_node.sh") || exit 3
done
if [ "${KF_VALIDATE:-1}" = 1 ]; then
  (cd /tmp && PYTHONPATH=/tmp/kf-site-b KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub" \
    python3 -m kernelforge validate 2>&1 | tee "$OUT/validate_b.log" | tail -3; exit "${PIPESTATUS[0]}") || rc=1
fi
for round in $(seq "${KF_ROUNDS:-3}"); do
  for tree in a b; do
    (cd /tmp && PYTHONPATH="/tmp/kf-site-$tree" KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub" \
      python3 "$REPO/benchmarks/run.py" --only ${KF_SECTIONS:-grouped} --no-evidence --no-append \
      --out-dir "/tmp/kf-ab-$tree" --json "$OUT/ab/$tree.r$round.json" > "$OUT/ab/$tree.r$round.log" 2>&1) \
      || { echo "run.py failed: release $tree, round $round"; tail -5 "$OUT/ab/$tree.r$round.log"; rc=1; }
  done
done
python3 "$REPO/benchmarks/kernel_ab_table.py" "$OUT/ab" 2>&1 | tee "$OUT/ab_table.md"
exit "$rc"
