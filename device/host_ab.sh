#!/usr/bin/env bash
# One device-tool call: the host path of eager calls, release against release on the same GPU.
# KF_RELEASES lists carry folders of wheels (as for wheel_ab.sh), each pip-installed into its own
# bare target (device/wheel_node.sh), only the release key trusted; then KF_ROUNDS (default 2)
# interleaved rounds of `benchmarks/diag.py launch-cost` and `diag.py eager-split` per release,
# each in a fresh process. Logs: $OUT/host_<release>.r<round>.log.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
read -r -a releases <<< "${KF_RELEASES:?KF_RELEASES: carry folders of wheels}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for rel in "${releases[@]}"; do
  install_wheels "$REPO/$rel" "/tmp/kf-site-$(basename "$rel")" || exit 3
done
rc=0
for round in $(seq "${KF_ROUNDS:-2}"); do
  for rel in "${releases[@]}"; do
    name="$(basename "$rel")"
    log="$OUT/host_$name.r$round.log"
    echo "== $name round $round"
    { PYTHONPATH="/tmp/kf-site-$name" python3 "$REPO/benchmarks/diag.py" launch-cost &&
      PYTHONPATH="/tmp/kf-site-$name" python3 "$REPO/benchmarks/diag.py" eager-split --top 0; } > "$log" 2>&1 || rc=1
    grep -v '^{\|^ \|function calls' "$log"
  done
done
exit "$rc"
