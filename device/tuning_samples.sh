#!/usr/bin/env bash
# One device-tool call: benchmarks/tuning_samples.py on a pip-installed release ($KF_WHEELS, default
# .carry/dist): every candidate the tuner times, at the M values $KF_SAMPLE_M (default 1024 4096
# 65536), against this card's committed table (kernelforge/data/tuning/<card>.sm_90a.json), read-only
# on the kernel wheel's cache; $KF_TUNE_ONLY (default '*') narrows the dispatch groups.
# $OUT/samples.log: one line per K-class and M.
set -uo pipefail
source "$(dirname "$0")/wheel_node.sh"
slug="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z_')"
# shellcheck disable=SC2086  # KF_SAMPLE_M: several values
python3 "$REPO/benchmarks/tuning_samples.py" --cache "$SITE"/kernelforge_kernels_sm90a/cache \
  --table "$REPO/kernelforge/data/tuning/$slug.sm_90a.json" --only "${KF_TUNE_ONLY:-*}" \
  --m ${KF_SAMPLE_M:-1024 4096 65536} --log "$OUT/samples.log"
