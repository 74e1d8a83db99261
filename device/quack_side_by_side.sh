#!/usr/bin/env bash
# Run on the GPU machine (device tool), one step list per call, the calls back to back (see
# device/quack_split_deps.sh, which prepares .carry/quack/ here and prints the calls):
#   stage    copy the carried folders .carry/quack/c*/ to /tmp/kfq-stage (kept while the machine is)
#   install  reassemble split wheels (checked against SHA256SUMS) and pip-install the staged wheels and
#            .carry/quack/dist (kernelforge, kf_quack, its signed sm_90a kernel wheel) into /tmp/kfq-site
#   tests    kf_quack's GPU tests against quack's own path (one line per declared variant; a test that
#            cannot run fails), kernels from the installed kernel wheel, only the release key trusted
#            (.carry/keys/release.pub): $OUT/tests.log
#   startup  the first call in fresh processes (KF_RUNS each, default 8; KF_OPS="rmsnorm softmax" picks
#            ops: quack's imports take 5-9 s a process, so about one op per call fits 10 minutes): quack
#            with an empty cache, with a warm .o cache, kernelforge from a cache directory (a copy of the kernel wheel's cache) and
#            from the installed kernel wheel: $OUT/startup.json, startup.log (a markdown table at its end)
#   kernels  kernel time, quack and kf_quack interleaved (CUDA-graph replay): $OUT/kernels.json, kernels.log
# No checkout on the path: the installed packages serve, from /tmp, as on a user's node.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/kfq-out}"; mkdir -p "$OUT"
STAGE=/tmp/kfq-stage
SITE=/tmp/kfq-site
BENCH="$REPO/examples/kernelforge-quack/benchmarks/side_by_side.py"
export PYTHONUNBUFFERED=1 KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub"
unset KERNELFORGE_CACHE_DIR KERNELFORGE_ALLOW_UNSIGNED QUACK_CACHE_DIR CUTE_DSL_CACHE_DIR
[ $# -gt 0 ] || set -- stage install tests startup kernels

installed() {
  if [ ! -f "$SITE/.installed" ]; then
    echo "not installed on this machine ($SITE): run the 'stage install' calls first (a new machine starts bare)" >&2
    exit 3
  fi
  # CuTe-DSL's `cutlass` package lies in nvidia_cutlass_dsl/dsl_packages, put on the path by a .pth
  # file that a --target install never runs.
  export PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages"
}

rc=0
for step in "$@"; do
  echo "== $step"
  case "$step" in
    stage)
      mkdir -p "$STAGE"
      for dir in "$REPO"/.carry/quack/c*/; do [ -d "$dir" ] && cp -n "$dir"* "$STAGE"/; done
      ls -la "$STAGE" ;;
    install)
      cd "$STAGE" || exit 3
      for first in *.part-00; do
        [ -e "$first" ] || continue
        whl="${first%.part-00}"
        cat "$whl".part-* > "$whl.tmp" && mv "$whl.tmp" "$whl"
      done
      if ! sha256sum -c --quiet SHA256SUMS; then
        echo "staged wheels incomplete or damaged: stage every .carry/quack/c* folder (one call each, back to back)" >&2
        exit 3
      fi
      rm -rf "$SITE"
      # pip byte-compiles what it installs: fresh processes then read .pyc, as on an installed node.
      python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$SITE" \
        $(awk '{print $2}' SHA256SUMS) "$REPO"/.carry/quack/dist/*.whl || exit 3
      touch "$SITE/.installed"
      cd /tmp
      PYTHONPATH="$SITE" python3 -c "import torch, tvm_ffi, importlib.metadata as m; print('torch', torch.__version__, \
'tvm_ffi', tvm_ffi.__version__, 'cutlass-dsl', m.version('nvidia-cutlass-dsl'), 'quack', m.version('quack-kernels'), \
'kernelforge', m.version('kernelforge'), 'kf_quack', m.version('kernelforge-quack'))" || exit 3
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ;;
    tests)
      installed
      ( cd "$REPO/examples/kernelforge-quack" && QUACK_CACHE_DIR=/tmp/kfq-quack-tests KERNELFORGE_REQUIRE_GPU=1 \
          python3 -m pytest -v -p no:cacheprovider -m gpu tests 2>&1 | tee "$OUT/tests.log" | tail -15
        exit "${PIPESTATUS[0]}" ) || rc=1 ;;
    startup)
      installed
      cd /tmp
      rm -rf /tmp/kfq-cachedir && cp -r "$SITE"/kernelforge_quack_kernels_sm90a/cache /tmp/kfq-cachedir
      # shellcheck disable=SC2086  # KF_OPS: some of the ops (a 10-minute call holds about one op at 8 runs)
      python3 "$BENCH" startup --runs "${KF_RUNS:-8}" ${KF_OPS:+--ops $KF_OPS} --kf-cache-dir /tmp/kfq-cachedir \
        --json "$OUT/startup.json" \
        2>&1 | tee "$OUT/startup.log" | tail -12
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    kernels)
      installed
      cd /tmp
      QUACK_CACHE_DIR=/tmp/kfq-quack-kernels python3 "$BENCH" kernels --json "$OUT/kernels.json" 2>&1 \
        | tee "$OUT/kernels.log" | tail -14
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    *) echo "unknown step $step (stage, install, tests, startup, kernels)" >&2; exit 2 ;;
  esac
done
exit "$rc"
