#!/usr/bin/env bash
# The release pipeline as one local script (what ci/release/github-workflow.yml runs as jobs):
#   build (N CPU shards, merged) -> package one kernel wheel per arch -> kernelforge wheel
#   -> validate on a GPU (optional here) -> dist/ holds everything to publish.
# Usage: ci/release/release.sh [OUT_DIR=dist] ; env: SHARDS (default 2), ARCHES ("sm_90a sm_100a"),
#        ONLY (a --only glob, default all), KF (the kernelforge command), VALIDATE=1 to run validate.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-dist}"
SHARDS="${SHARDS:-2}"
ARCHES="${ARCHES:-sm_90a sm_100a}"
KF="${KF:-python -m kernelforge}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
arch_args=(); for a in $ARCHES; do arch_args+=(--arch "$a"); done
only_args=(); if [ -n "${ONLY:-}" ]; then only_args=(--only "$ONLY"); fi

shard_dirs=()
for ((i = 1; i <= SHARDS; i++)); do           # shards are 1-based; in CI one job per shard
  $KF build --cache "$WORK/shard-$i" --shard "$i/$SHARDS" "${arch_args[@]}" "${only_args[@]}"
  shard_dirs+=("$WORK/shard-$i")
done
$KF cache merge --cache "$WORK/cache" "${shard_dirs[@]}"
$KF cache verify --cache "$WORK/cache"
for a in $ARCHES; do
  $KF package --cache "$WORK/cache" --arch "$a" --out "$OUT"
done
python -m pip wheel -q --no-deps -w "$OUT" .                  # the kernelforge wheel itself
if [ "${VALIDATE:-0}" = 1 ]; then                              # needs a GPU of one of ARCHES
  $KF validate --cache "$WORK/cache"
fi
( cd "$OUT" && sha256sum -- *.whl > SHA256SUMS )
echo "release artifacts in $OUT:"; ls -l "$OUT"
