# Sourced by the device scripts that run kernelforge as a user's GPU node does: the release's
# wheels ($KF_WHEELS, default .carry/dist: kernelforge, the kernel wheels, the op-family plugin) and
# the dependency wheels the image lacks (.carry/deps) pip-installed into a bare target $SITE
# (byte-compiled, as pip does by default), no checkout on the path, only the release key trusted
# (.carry/keys/release.pub), the working directory /tmp. Sets REPO, OUT, SITE; exits 3 if pip fails.
# KF_INSTALL_LATER=1: the environment and `install_wheels` only, for scripts that install several
# releases side by side (each then runs with PYTHONPATH=its site).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"

install_wheels() {  # install_wheels WHEEL_DIR SITE: the wheels and .carry/deps into a fresh bare target
  local wheels="$1"  # a relative WHEEL_DIR is of the repository root (the working directory is /tmp)
  [[ "$wheels" = /* ]] || wheels="$REPO/$wheels"
  rm -rf "$2"
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$2" "$REPO"/.carry/deps/*.whl "$wheels"/*.whl
}

cd /tmp
export PYTHONUNBUFFERED=1 KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub"
unset KERNELFORGE_CACHE_DIR KERNELFORGE_ALLOW_UNSIGNED
if [ "${KF_INSTALL_LATER:-0}" != 1 ]; then
  SITE="${SITE:-/tmp/kf-site}"
  install_wheels "${KF_WHEELS:-$REPO/.carry/dist}" "$SITE" || exit 3
  export PYTHONPATH="$SITE"
fi
