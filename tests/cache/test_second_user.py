"""The ownership policy (README "Security model", "Ownership policy") with a real second user: a
process running as uid 12345 (setpriv, no passwd entry needed) runs `kernelforge cache verify` and a
runtime lookup (the real DispatchTable over a cache of dummy modules, `load_function` replaced: what
is checked is which caches and paths are trusted) against

* a cache owned by root: trusted (root is), it serves; the user cannot repair it (not writable);
* a cache owned by that user with group-writable files: refused, naming the path and the fix; the
  opt-out accepts it; `cache repair` run by that user fixes it;
* that user's cache, used by root: refused ("owned by uid 12345", fix chown).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from kernelforge.sources import source_hash
from tests.cache._fault_helpers import REPO, kf
from tests.runtime.test_tuning import COORDS, _meta, _publish

UID = 12345
AS_USER = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
LOOKUP = """
import json, sys
from kernelforge.runtime import dispatch, layer_reader
layer_reader.load_function = lambda trusted, entry, runtime: entry["name"]  # which build serves, not its code
coords = json.loads(sys.argv[2])
try:
    fn, cand = dispatch.DispatchTable(sys.argv[1]).resolve("rmsnorm_quantize", coords, (9, 0), 4096, 16, 256, 8192,
                                                           128)
    out = {"ok": True, "name": fn}
except Exception as exc:
    out = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
print(json.dumps(out))
"""


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run processes as a second user"
    if not shutil.which("setpriv"):
        return "setpriv(1) is not installed: cannot run a process as another uid"
    proc = subprocess.run([*AS_USER, sys.executable, "-c", "import kernelforge"], capture_output=True, text=True,
                          cwd=REPO)
    if proc.returncode != 0:
        return f"uid {UID} cannot run {sys.executable} with kernelforge: {proc.stderr.strip()[-200:]}"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


@pytest.fixture
def base() -> Path:
    """A directory every user can reach (pytest's tmp_path is private to root), owned by root, 0755."""
    d = Path(tempfile.mkdtemp(prefix="kf-second-user-", dir="/tmp"))
    os.chmod(d, 0o755)
    (d / "home").mkdir(mode=0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _cache(root: Path) -> Path:
    """A cache of two builds of one rmsnorm_quantize K-class and their runtime library, written by root."""
    old = os.umask(0o022)
    try:
        store = CacheStore(root)
        src = source_hash("rmsnorm_quantize")
        for e in (32, 64):
            meta = _meta("h8k", 8192, e, src)
            _publish(store, hashlib.sha256(meta["name"].encode()).hexdigest(), meta["name"].encode(), **meta)
        _publish(store, "rt" * 32, b"runtime", kind="runtime", op="runtime", name="runtime-x", variant={},
                 arch="host", toolchain_id="tc", toolchain={}, source_hash="", main_file="libkfrt-x.so",
                 build_time_s=0.0)
    finally:
        os.umask(old)
    return root


def _env(base: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(base / "home"), "XDG_CACHE_HOME": str(base / "home"), "PYTHONDONTWRITEBYTECODE": "1",
            "KERNELFORGE_TRUST_SHARED_CACHE": "", **extra}


def _lookup(root: Path, base: Path, as_: list[str], **env: str) -> dict:
    e = {**os.environ, **_env(base, **env)}
    proc = subprocess.run([*as_, sys.executable, "-c", LOOKUP, str(root), json.dumps(COORDS)], capture_output=True,
                          text=True, env=e, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def _chmod_tree(root: Path, add: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, ""]:
            path = os.path.join(dirpath, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | add)


def test_the_user_trusts_and_uses_a_cache_owned_by_root(base: Path) -> None:
    root = _cache(base / "root-cache")
    v = kf("cache", "verify", "--cache", str(root), as_=AS_USER, env=_env(base))
    assert v.returncode == 0 and "OK: 3 entries verified" in v.stdout, v.stdout + v.stderr
    r = _lookup(root, base, AS_USER)
    assert r["ok"] and r["name"].endswith(".e32c1"), r  # the heuristic's pick
    rep = kf("cache", "repair", "--cache", str(root), as_=AS_USER, env=_env(base))
    assert rep.returncode == 2 and f"cache root {root} is not writable" in rep.stderr, rep.stderr
    assert not list((root / "v1").glob("usage/*.log")), "a user wrote usage records into root's cache"


def test_the_users_group_writable_cache_is_refused_until_repaired(base: Path) -> None:
    root = _cache(base / "user-cache")
    _chown_tree(root, UID)
    _chmod_tree(root, stat.S_IWGRP)
    v = kf("cache", "verify", "--cache", str(root), as_=AS_USER, env=_env(base))
    assert v.returncode == 1, v.stdout + v.stderr
    untrusted = [line for line in v.stdout.splitlines() if "untrusted path" in line]
    assert untrusted and all("is writable by group" in line for line in untrusted), v.stdout
    assert any(line.rstrip().endswith(f"{root} (is writable by group (mode 0775))") for line in untrusted), v.stdout
    r = _lookup(root, base, AS_USER)
    assert not r["ok"] and r["type"] == "UntrustedCache", r
    assert str(root) in r["message"] and "writable by group" in r["message"] and "cache repair" in r["message"]
    assert "KERNELFORGE_TRUST_SHARED_CACHE=1" in r["message"]
    # the opt-out for shared caches accepts it
    opted = _env(base, KERNELFORGE_TRUST_SHARED_CACHE="1")
    assert kf("cache", "verify", "--cache", str(root), as_=AS_USER, env=opted).returncode == 0
    assert _lookup(root, base, AS_USER, KERNELFORGE_TRUST_SHARED_CACHE="1")["ok"]
    # the documented fix, run by the owner
    rep = kf("cache", "repair", "--cache", str(root), as_=AS_USER, env=_env(base))
    assert rep.returncode == 0 and "removed group/other write permission" in rep.stdout, rep.stdout + rep.stderr
    assert kf("cache", "verify", "--cache", str(root), as_=AS_USER, env=_env(base)).returncode == 0
    r = _lookup(root, base, AS_USER)
    assert r["ok"] and r["name"].endswith(".e32c1"), r
    assert all(os.lstat(p).st_uid == UID for p in [root, *root.rglob("*")])  # repair changed no owner


def test_root_refuses_the_users_cache(base: Path) -> None:
    root = _cache(base / "user-cache")
    _chown_tree(root, UID)
    r = _lookup(root, base, [])
    assert not r["ok"] and r["type"] == "UntrustedCache", r
    assert f"owned by uid {UID}" in r["message"] and "chown" in r["message"], r
    v = kf("cache", "verify", "--cache", str(root), env=_env(base))
    assert v.returncode == 1 and f"is owned by uid {UID}" in v.stdout, v.stdout
    assert _lookup(root, base, AS_USER)["ok"]  # its owner uses it
    _chown_tree(root, 0)  # the documented fix (`chown -R $(id -u) ROOT`)
    assert _lookup(root, base, [])["ok"]
    assert kf("cache", "verify", "--cache", str(root), env=_env(base)).returncode == 0
