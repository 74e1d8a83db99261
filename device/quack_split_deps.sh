#!/usr/bin/env bash
# Run HERE (CPU, PyPI reachable), not on the GPU machine: everything device/quack_side_by_side.sh
# needs on a GPU machine that has Python 3.12 and torch but neither CuTe-DSL nor apache-tvm-ffi, laid
# out as carry folders that each fit one device call (64 MiB with the working tree):
#   .carry/quack/c1, c2, ...  the cp312 manylinux x86_64 wheels the GPU image lacks (CuTe-DSL at the
#                             builder's versions, quack-kernels, torch-c-dlpack-ext; apache-tvm-ffi and
#                             cryptography for kernelforge's runtime); a wheel over 48 MiB (CuTe-DSL's
#                             compiler library, ~87 MiB) is split into 48 MiB parts, reassembled there
#                             and checked against SHA256SUMS. Folders are packed up to 56 MiB.
#   .carry/quack/dist         with KF_SIGN_KEY=<release private key>: kernelforge's wheel from this
#                             tree, kf_quack's wheel, and its sm_90a kernel wheel, built on this CPU
#                             (make install-quack; kernelforge build/cache sign/package), signed by
#                             that key; the GPU machine trusts .carry/keys/release.pub.
# Then, on the device, one call per folder, back to back (a machine goes back after 30 s idle and the
# staged parts with it); the last calls carry dist and keys too. The commands are printed at the end.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
DEST=.carry/quack
PART_MIB=48
FOLDER_MIB=56
PY=.venv/bin/python
version() { $PY -c "import importlib.metadata as m; print(m.version('$1'))"; }
CUTLASS="$(version nvidia-cutlass-dsl)"
TVM_FFI="$(version apache-tvm-ffi)"
QUACK="$(sed -n 's/.*"quack-kernels==\([^"]*\)".*/\1/p' examples/kernelforge-quack/pyproject.toml)"

rm -rf "$DEST" && mkdir -p "$DEST/wheels"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST/wheels" \
  "nvidia-cutlass-dsl==$CUTLASS" "nvidia-cutlass-dsl-libs-base==$CUTLASS" "nvidia-cutlass-dsl-libs-core==$CUTLASS" \
  "nvidia-cutlass-dsl-libs-cu12==$CUTLASS" "quack-kernels==$QUACK" "torch-c-dlpack-ext==0.1.5" \
  "apache-tvm-ffi==$TVM_FFI" "cryptography==$(version cryptography)" "cffi==$(version cffi)" \
  "pycparser==$(version pycparser)" 2>&1 | grep -v "is ignored" || true

# Split what is too large for one call; SHA256SUMS holds the whole wheels, checked after reassembly.
(cd "$DEST/wheels" && sha256sum ./*.whl > SHA256SUMS)
for whl in "$DEST"/wheels/*.whl; do
  if [ "$(stat -c %s "$whl")" -gt $((PART_MIB * 1048576)) ]; then
    split -b "${PART_MIB}M" -d -a 2 "$whl" "$whl.part-" && rm "$whl"
  fi
done

# First-fit decreasing into folders of at most FOLDER_MIB.
python3 - "$DEST" "$FOLDER_MIB" <<'PY'
import os, shutil, sys
dest, cap = sys.argv[1], int(sys.argv[2]) * 1048576
files = sorted((os.path.join(dest, "wheels", f) for f in os.listdir(os.path.join(dest, "wheels"))),
               key=os.path.getsize, reverse=True)
bins = []
for f in files:
    size = os.path.getsize(f)
    for b in bins:
        if b[0] + size <= cap:
            b[0] += size; b[1].append(f); break
    else:
        bins.append([size, [f]])
for i, (size, members) in enumerate(bins, 1):
    os.makedirs(f"{dest}/c{i}")
    for f in members:
        shutil.move(f, f"{dest}/c{i}/")
    print(f"{dest}/c{i}: {size / 1048576:.1f} MiB, {len(members)} files")
os.rmdir(os.path.join(dest, "wheels"))
PY

if [ -n "${KF_SIGN_KEY:-}" ]; then
  make --no-print-directory install-quack >/dev/null
  rm -rf build/quack-release && mkdir -p "$DEST/dist"
  build/quack-venv/bin/python -m kernelforge build -q -j 2 --cache build/quack-release --arch sm_90a --only 'quack_*'
  build/quack-venv/bin/python -m kernelforge cache sign --key "$KF_SIGN_KEY" --cache build/quack-release
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" build/quack-venv/bin/python -m kernelforge package \
    --cache build/quack-release --arch sm_90a --sign-key "$KF_SIGN_KEY" --out "$DEST/dist"
  rm -rf build/lib build/bdist.*  # a stale build/lib would put deleted modules into the wheel (docs/release.md)
  $PY -m pip wheel -q --no-deps --no-build-isolation -w "$DEST/dist" . examples/kernelforge-quack 2>/dev/null
  rm -rf build/lib build/bdist.*
  ls -la "$DEST/dist"
  [ -f .carry/keys/release.pub ] || echo "note: .carry/keys/release.pub (the key's public line) is missing" >&2
else
  echo "KF_SIGN_KEY is not set: no kernelforge wheels in $DEST/dist (the side by side needs them)" >&2
fi

last="$(ls -d "$DEST"/c* | sort -V | tail -1)"
echo
echo "device calls, back to back (kind nvidia-h100-x1 or nvidia-h200; timeout_s 600 each):"
for dir in $(ls -d "$DEST"/c* | sort -V); do
  if [ "$dir" = "$last" ]; then
    echo "  carry [\"$dir\", \"$DEST/dist\", \".carry/keys\"]: bash device/quack_side_by_side.sh stage install tests kernels"
  else
    echo "  carry [\"$dir\"]: bash device/quack_side_by_side.sh stage"
  fi
done
echo "  no carry: bash device/quack_side_by_side.sh startup"
