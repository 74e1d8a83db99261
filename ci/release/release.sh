#!/usr/bin/env bash
# The release pipeline as one local script (ci/release/github-workflow.yml runs the same steps as jobs):
#   build N CPU shards, each signed -> merge (only what the release key signed) -> verify
#   -> package signed kernel wheels (one per distribution and arch) -> the kernelforge wheel
#   -> validate on a GPU (optional here) -> OUT holds everything to publish, with SHA256SUMS.
# Usage: ci/release/release.sh [OUT_DIR=dist]
# env: SIGNING_KEY     the release private key (`kernelforge key generate`; in CI a secret), required
#      TRUSTED_KEYS    the public keys merge and verify trust (default: "$SIGNING_KEY.pub")
#      SPECS (space-separated spec files or directories, default specs/: the spec files this repository's
#      release builds; add an op-family plugin's spec files to ship its kernels too),
#      SHARDS (2), ARCHES ("sm_90a sm_100a"), ONLY (space-separated --only globs, default all),
#      KF (the kernelforge command; the op-family plugins to ship must be installed where it runs),
#      REBUILD_SAMPLE (merge --rebuild-sample, e.g. 0.05: rebuild and compare a sample of every shard),
#      SOURCE_DATE_EPOCH (default: the last commit's time, so two builds give the same wheels),
#      VALIDATE=1 to run `kernelforge validate` here (needs a GPU of one of ARCHES).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-dist}"
: "${SIGNING_KEY:?set SIGNING_KEY to the release private key (kernelforge key generate KEY)}"
TRUSTED_KEYS="${TRUSTED_KEYS:-$SIGNING_KEY.pub}"
SHARDS="${SHARDS:-2}"
ARCHES="${ARCHES:-sm_90a sm_100a}"
KF="${KF:-python -m kernelforge}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}"
export KERNELFORGE_TRUSTED_KEYS="$TRUSTED_KEYS"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
arch_args=(); for a in $ARCHES; do arch_args+=(--arch "$a"); done
only_args=(); for g in ${ONLY:-}; do only_args+=(--only "$g"); done
spec_args=(); for s in ${SPECS:-specs}; do spec_args+=(--spec "$s"); done
audit_args=(); if [ -n "${REBUILD_SAMPLE:-}" ]; then audit_args=(--rebuild-sample "$REBUILD_SAMPLE"); fi

shard_dirs=()
for ((i = 1; i <= SHARDS; i++)); do           # shards are 1-based; in CI one job per shard
  $KF build -q --cache "$WORK/shard-$i" --shard "$i/$SHARDS" "${spec_args[@]}" "${arch_args[@]}" "${only_args[@]}"
  $KF cache sign --key "$SIGNING_KEY" --cache "$WORK/shard-$i"
  shard_dirs+=("$WORK/shard-$i")
done
$KF cache merge --cache "$WORK/cache" --trusted-keys "$TRUSTED_KEYS" "${audit_args[@]}" "${shard_dirs[@]}"
$KF cache verify --cache "$WORK/cache"
for a in $ARCHES; do
  $KF package --cache "$WORK/cache" --arch "$a" --sign-key "$SIGNING_KEY" --out "$OUT"
done
# setuptools builds in-tree and copies build/lib into the wheel as it finds it: a module deleted or
# moved since the last build would ship again (and register its torch ops twice), so start clean.
rm -rf build/lib build/bdist.*
python -m pip wheel -q --no-deps -w "$OUT" .                   # the kernelforge wheel itself
if [ "${VALIDATE:-0}" = 1 ]; then
  $KF validate --cache "$WORK/cache"
fi
( cd "$OUT" && sha256sum -- *.whl > SHA256SUMS )
echo "release artifacts in $OUT:"; ls -l "$OUT"
