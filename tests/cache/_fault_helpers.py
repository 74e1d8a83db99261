"""Helpers of the hostile-input tests (FIFOs, oversized members, a full disk, a second user): the real
CLI in a subprocess under a timeout, and small caches of fake entries."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from kernelforge.cache import CacheStore, Entry
from tests.cache import _cache_helpers as h

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30  # a command that waits on a FIFO never ends: the test fails on TimeoutExpired instead


def kf(*args: str, env: dict | None = None, as_: list[str] = (), timeout: float = TIMEOUT_S,
       cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m kernelforge ARGS` in a fresh process; never a traceback."""
    e = {**os.environ, "COLUMNS": "200", **(env or {})}
    e.pop("KERNELFORGE_CACHE_DIR", None)
    proc = subprocess.run([*as_, sys.executable, "-m", "kernelforge", *args], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


def fake_cache(root: Path, names: tuple[str, ...] = ("a", "b", "c"), payload: int = 64) -> dict[str, Entry]:
    """A cache of fake kernel entries (module.so of `payload` bytes each, plus a sidecar): name -> Entry."""
    store = CacheStore(root)
    out = {}
    for name in names:
        entry, _ = store.get_or_build(h.key_of(name), h.fake_build(name.encode() * payload, name=name))
        out[name] = entry
    return out


def make_fifo(path: Path) -> Path:
    """Replace `path` (if any) by a FIFO: opening it for reading blocks until a writer comes."""
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return path


def make_socket(path: Path) -> Path:
    """A listening-less unix socket at `path` (bound relative to its directory: paths are limited to 107 bytes)."""
    if path.exists():
        path.unlink()
    cwd = os.getcwd()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(path.parent)
        s.bind(path.name)
    finally:
        os.chdir(cwd)
        s.close()
    return path


def tree_digests(root: Path) -> dict[str, bytes]:
    """relative path -> bytes of every regular file below root/v1/artifacts and runtime (what must survive)."""
    out = {}
    for sub in ("artifacts", "runtime"):
        base = root / "v1" / sub
        for p in sorted(base.rglob("*")) if base.is_dir() else ():
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out
