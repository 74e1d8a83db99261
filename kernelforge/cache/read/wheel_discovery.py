"""Where the installed kernel wheels are, remembered per interpreter and sys.path in the writable
cache layer, so that a process's first kernel call lists no unchanged site directory.

Finding the kernel wheels lists every sys.path directory (`cache.read.installed`: a cost that
grows with the environment and with the working directory, which is sys.path's first entry for
`python -c`, `-m` and the REPL), reads their entry points and locates their packages. The
runtime's first call (`layers.resolve_layers(remember=True)`) keeps what it found, when it found a
kernel wheel, in `v1/found-wheels/<id>.json` of the writable layer, `<id>` naming the interpreter
and sys.path (made absolute: `""` is the working directory): each sys.path directory's device,
inode and change times with its `*.dist-info` names, and the kernel wheels' entry points and
packages. pip creates, removes or renames a `*.dist-info` directory on every install, upgrade and
uninstall, and creating or removing a directory entry updates the parent's mtime and ctime
(https://pubs.opengroup.org/onlinepubs/9799919799/functions/mkdir.html). So a later process
lists only the directories whose times changed (a working directory being written to, say, or
one changed within two seconds of the record, whose times are not kept); while those hold the
recorded `*.dist-info` names, every directory is the recorded one (device and inode) and the
recorded packages are still directories, it uses the record, and otherwise it finds everything
again and rewrites the record.

A record only says where wheels are: every wheel it names is opened and signature-checked as if
it had been found by listing (`cache.read.wheel_signature`), so a forged record can hide a wheel
but never make one served. Whoever could write it could already write the cache, which is
outside the threat model (docs/cache-and-security.md). Reports and `cache verify` always list.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelforge.cache.read import installed
from kernelforge.cache.read.fsio import make_dirs
from kernelforge.cache.read.trust import MissingCacheFile, TrustedRoot
from kernelforge.errors import CacheError

RECORDS_DIR = "found-wheels"  # under v1/ of the writable cache root
MAX_RECORDS = 64  # one per interpreter and sys.path (a script's directory is its first entry)
_SCHEMA = 1

Wheels = list[tuple[installed.KernelEntryPoint, "Path | None"]]  # entry point, package (None: not importable)
Found = tuple[dict[str, installed.Installed], Wheels]


RACY_NS = 2 * 10**9  # a directory changed this recently may change again within its timestamp's tick


def _identity(entry: str, now_ns: int | None = None) -> list[int | None] | None:
    """[dev, inode, mtime, ctime] of a sys.path directory (None: not there). With `now_ns` (the
    record being written), times that close to now are left out, so that an install landing in the
    same timestamp tick as the listing is still seen: git's racy-clean rule
    (https://git-scm.com/docs/racy-git)."""
    try:
        st = os.stat(entry or ".")
    except OSError:
        return None
    if now_ns is not None and now_ns - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return [st.st_dev, st.st_ino, None, None]
    return [st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def record_name(python: str, path: list[str]) -> str:
    return hashlib.sha256(json.dumps([python, path]).encode()).hexdigest()[:32] + ".json"


def _package_of(value: str) -> Path | None:
    """Where the kernel wheel's import package is, located without running its code."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(value)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(locations[0]) if locations else None


def _wheels_of(group: str, listing: dict[str, installed.Installed]) -> Wheels:
    return [(ep, _package_of(ep.value)) for ep in installed.kernel_entry_points(group, listing)]


def scan(group: str) -> Found:
    """The installed distributions and the kernel wheels' entry points of `group` with their
    packages, by listing sys.path."""
    listing = installed.installed()
    return listing, _wheels_of(group, listing)


def _from_record(data: Any, path: list[str]) -> Found | None:
    """The record's findings if they hold for this sys.path now (see the module docstring), else None."""
    if (not isinstance(data, dict) or data.get("schema") != _SCHEMA or data.get("python") != sys.executable
            or data.get("path") != path or not isinstance(data.get("entries"), list)
            or len(data["entries"]) != len(path)):
        return None
    try:
        per_entry = []
        for entry, (identity, names) in zip(path, data["entries"]):
            now = _identity(entry)
            if identity != now:
                # The same directory with other times: listed again, still valid if it holds the
                # same distributions. Another directory (or none): found again.
                if now is None or identity is None or identity[:2] != now[:2]:
                    return None
                if names != (installed.dist_infos(entry) or []):
                    return None
            per_entry.append((entry, [str(n) for n in names]))
        wheels = [(installed.KernelEntryPoint(str(n), str(v), str(dist), str(ver)), Path(p) if p else None)
                  for n, v, dist, ver, p in data["wheels"]]
    except (KeyError, TypeError, ValueError):
        return None
    if any(package is not None and not os.path.isdir(package) for _, package in wheels):
        return None
    return installed.listing_of(per_entry), wheels


def found(group: str, memo: TrustedRoot | None) -> Found:
    """`scan(group)`, through the record of this interpreter and sys.path in the root of `memo`
    (the writable cache root; None: always list, write nothing)."""
    if memo is None or not all(isinstance(entry, str) for entry in sys.path):
        return scan(group)
    # Absolute paths: "" (the working directory) and relative entries name other directories
    # in another working directory, and the packages found are recorded absolute.
    path = [os.path.abspath(entry or ".") for entry in sys.path]
    name = record_name(sys.executable, path)
    try:
        hit = _from_record(json.loads(memo.read_bytes(("v1", RECORDS_DIR, name))), path)
    except (MissingCacheFile, CacheError, OSError, ValueError):
        hit = None
    if hit is not None:
        return hit
    now_ns = time.time_ns()
    entries = [(_identity(entry, now_ns), installed.dist_infos(entry) or []) for entry in path]
    listing = installed.listing_of((entry, names) for entry, (_, names) in zip(path, entries))
    wheels = _wheels_of(group, listing)
    if wheels:  # nothing to remember without a kernel wheel: the cache stays unwritten
        _write(memo.root / "v1" / RECORDS_DIR, name, {
            "schema": _SCHEMA, "python": sys.executable, "path": path, "entries": entries,
            "wheels": [[ep.name, ep.value, ep.distribution, ep.version, str(p) if p else None]
                       for ep, p in wheels]})
    return listing, wheels


def _write(directory: Path, name: str, record: dict[str, Any]) -> None:
    """Best effort, without fsync (a record lost in a crash is found again): a read-only cache
    stays unwritten; directories 0755 and files 0644 at most whatever the umask (the trust policy
    refuses group-writable ones); the oldest records beyond MAX_RECORDS go."""
    try:
        make_dirs(directory)
        tmp = directory / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record, separators=(",", ":")))
        os.replace(tmp, directory / name)
        records = list(directory.glob("*.json"))
        if len(records) > MAX_RECORDS:
            records.sort(key=lambda p: p.stat().st_mtime_ns)
            for old in records[:-MAX_RECORDS]:
                old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        pass
