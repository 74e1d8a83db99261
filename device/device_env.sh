# Sourced (from the checkout's root) by the device scripts that run kernelforge from the checkout:
# $OUT, unbuffered Python, the apache-tvm-ffi wheel of .whl/ installed into /tmp/kf-site, and
# kernelforge byte-compiled like a user's install (pip compiles on install; the device sets
# PYTHONDONTWRITEBYTECODE, so without this every fresh process of a startup measurement would
# compile every module it imports).
OUT="${OUT:-/tmp/kf-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/kf-site .whl/*.whl
python3 -m compileall -q kernelforge >/dev/null || true
