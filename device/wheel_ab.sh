#!/usr/bin/env bash
# One device-tool call: several releases' wheels on the same GPU, as users' nodes run them.
# KF_RELEASES lists carry folders of wheels (default ".carry/dist .carry/dist-b": the release and
# the same wheels with a rebuilt kernel wheel and the kernelforge wheel of its tree); each is
# pip-installed into its own bare target (device/wheel_node.sh), only the release key trusted.
# `validate` runs on every release after the first (KF_VALIDATE=0 skips it), then KF_ROUNDS
# (default 3) interleaved rounds of `benchmarks/run.py --only $KF_SECTIONS $KF_RUN_ARGS --no-evidence`
# per release (KF_RUN_ARGS: more run.py flags, e.g. "--fused-h 32768"), and the comparison table
# (benchmarks/kernel_ab_table.py; a column per folder name, then each release's change against the first).
# The card's name leads the log; $OUT/ab holds every run.json.
#   here: kernelforge build; kernelforge package --dist kernelforge --sign-key KEY --out .carry/<name>;
#         pip wheel . (the tree's kernelforge wheel) and the plugin wheels of .carry/dist into it
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
mkdir -p "$OUT/ab"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
read -r -a releases <<< "${KF_RELEASES:-.carry/dist .carry/dist-b}"
rc=0
for rel in "${releases[@]}"; do
  install_wheels "$REPO/$rel" "/tmp/kf-site-$(basename "$rel")" || exit 3
done
for rel in "${releases[@]:1}"; do
  name="$(basename "$rel")"
  [ "${KF_VALIDATE:-1}" = 1 ] || break
  echo "== validate $name"
  PYTHONPATH="/tmp/kf-site-$name" python3 -m kernelforge validate 2>&1 | tee "$OUT/validate_$name.log" | tail -1
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
for round in $(seq "${KF_ROUNDS:-3}"); do
  for rel in "${releases[@]}"; do
    name="$(basename "$rel")"
    # shellcheck disable=SC2086  # KF_SECTIONS: several section names
    PYTHONPATH="/tmp/kf-site-$name" python3 "$REPO/benchmarks/run.py" --only ${KF_SECTIONS:-grouped} ${KF_RUN_ARGS:-} --no-evidence \
      --no-append --out-dir "/tmp/kf-ab-$name" --json "$OUT/ab/$name.r$round.json" > "$OUT/ab/$name.r$round.log" 2>&1 \
      || { echo "run.py failed: release $name, round $round"; tail -5 "$OUT/ab/$name.r$round.log"; rc=1; }
  done
done
python3 "$REPO/benchmarks/kernel_ab_table.py" "$OUT/ab" --base "$(basename "${releases[0]}")" 2>&1 | tee "$OUT/ab_table.md"
exit "$rc"
