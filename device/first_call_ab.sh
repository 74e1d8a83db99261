#!/usr/bin/env bash
# One device-tool call (or a step of one): the first call of two releases installed side by side
# as a user's GPU node installs them (device/wheel_node.sh), each from its kernel wheel and from a
# cache directory copied out of the new release's kernel wheel, alternated
# (benchmarks/first_call_ab.py). KF_OLD, KF_NEW: the release directories (default .carry/dist and
# .carry/dist-new); KF_RUNS: processes per source (default 12); KF_STAGES=1: the stage medians
# (first_call_ab.py --stages). Log: $OUT/first_call_ab.log.
set -uo pipefail
KF_INSTALL_LATER=1 source "$(dirname "$0")/wheel_node.sh"
install_wheels "$REPO/${KF_OLD:-.carry/dist}" /tmp/kf-site-old || exit 3
install_wheels "$REPO/${KF_NEW:-.carry/dist-new}" /tmp/kf-site-new || exit 3
rm -rf /tmp/kf-cachedir && cp -r /tmp/kf-site-new/kernelforge_kernels_sm90a/cache /tmp/kf-cachedir
python3 "$REPO/benchmarks/first_call_ab.py" --site old=/tmp/kf-site-old --site new=/tmp/kf-site-new \
  --cache-dir /tmp/kf-cachedir --runs "${KF_RUNS:-12}" ${KF_STAGES:+--stages} > "$OUT/first_call_ab.log" 2>&1
rc=$?
grep -v "^[[{]" "$OUT/first_call_ab.log" | tail -24
exit $rc
