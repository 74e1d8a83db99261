# Sourced by the device scripts that run kernelforge as a user's GPU node does: the release's
# wheels ($KF_WHEELS, default .carry/dist: kernelforge, the kernel wheels, the op-family plugin) and
# the dependency wheels the image lacks (.carry/deps) pip-installed into a bare target $SITE
# (byte-compiled, as pip does by default), no checkout on the path, only the release key trusted
# (.carry/keys/release.pub), the working directory /tmp. Sets REPO, OUT, SITE; exits 3 if pip fails.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
SITE="${SITE:-/tmp/kf-site}"
rm -rf "$SITE"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target "$SITE" \
  "$REPO"/.carry/deps/*.whl "${KF_WHEELS:-$REPO/.carry/dist}"/*.whl || exit 3
cd /tmp
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 KERNELFORGE_TRUSTED_KEYS="$REPO/.carry/keys/release.pub"
unset KERNELFORGE_CACHE_DIR KERNELFORGE_ALLOW_UNSIGNED
