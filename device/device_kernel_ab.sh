#!/usr/bin/env bash
# One device-tool call: compare kernel versions on the same GPU. Each tree in KF_TREES is a folder
# holding a `kernelforge/` package (a copy with an edited kernel); all read one cache (KF_CACHE)
# that holds every tree's builds side by side (their source hashes differ, so do their keys).
# Per tree: the GPU tests selected by KF_TESTS (pytest -k expression over KF_TEST_FILES), then
# KF_ROUNDS interleaved rounds of `benchmarks/run.py --only $KF_SECTIONS`.
# Writes $OUT/kernel_ab[-$KF_TAG].log and .tar.gz (one run.json per tree and round);
# `python benchmarks/kernel_ab_table.py kernel_ab.tar.gz` prints the comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
source device/device_env.sh
rm -rf "$OUT/ab"; mkdir -p "$OUT/ab"
cache="$(realpath "${KF_CACHE:?KF_CACHE: the cache folder every tree reads}")"
rc=0
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  for tree in ${KF_TREES:?KF_TREES: folders that hold a kernelforge package}; do
    src="$(realpath "$tree")"
    python3 -m compileall -q "$src/kernelforge" >/dev/null || true
    if [ -n "${KF_TESTS:-}" ]; then
      echo "== tests, tree $tree"
      (cd "$src" && PYTHONPATH="/tmp/kf-site:$src" KERNELFORGE_CACHE_DIR="$cache" python3 -m pytest -q -p no:cacheprovider \
        -m gpu -k "$KF_TESTS" ${KF_TEST_FILES:-kernelforge/families/quantize_columnwise/test_gpu.py} 2>&1 | tail -4) || rc=1
    fi
  done
  for round in $(seq "${KF_ROUNDS:-2}"); do
    for tree in $KF_TREES; do
      src="$(realpath "$tree")"; name="$(basename "$tree")"
      echo "== round $round, tree $name"
      PYTHONPATH="/tmp/kf-site:$src" KERNELFORGE_CACHE_DIR="$cache" python3 benchmarks/run.py \
        --only ${KF_SECTIONS:-dual rht grouped} --out-dir "$OUT/ab/plots" --json "$OUT/ab/$name.r$round.json" \
        --no-append 2>&1 | grep -vE "^\s*$" | tail -60 || rc=1
    done
  done
} 2>&1 | tee "$OUT/kernel_ab${KF_TAG:+-$KF_TAG}.log"
tar -czf "$OUT/kernel_ab${KF_TAG:+-$KF_TAG}.tar.gz" -C "$OUT/ab" $(cd "$OUT/ab" && ls *.json)
rm -rf "$OUT/ab"
exit $rc
