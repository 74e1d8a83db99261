"""Where the installed kernel wheels are, remembered per interpreter and sys.path in the writable
cache layer, so that a process's first kernel call lists no unchanged site directory.

Finding the kernel wheels lists every sys.path directory (`cache.read.installed`: a cost that
grows with the environment and with the working directory, which is sys.path's first entry for
`python -c`, `-m` and the REPL), reads their entry points and locates their packages. The
runtime's first call (`layers.resolve_layers(remember=True)`) keeps what it found in
`v1/found-wheels/<id>.json` of the writable layer, `<id>` naming the interpreter and sys.path:
each sys.path directory's identity and change times with its `*.dist-info` names, and the kernel
wheels' entry points and packages. pip creates, removes or renames a `*.dist-info` directory on
every install, upgrade and uninstall, and creating or removing a directory entry updates the
parent's mtime and ctime (https://pubs.opengroup.org/onlinepubs/9799919799/functions/mkdir.html).
So a later process lists only the directories whose identity or times changed (a working
directory being written to, say); while their `*.dist-info` names are the recorded ones and the
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
from pathlib import Path
from typing import Any

from kernelforge.cache.read import installed
from kernelforge.cache.read.trust import MissingCacheFile, TrustedRoot
from kernelforge.errors import CacheError

RECORDS_DIR = "found-wheels"  # under v1/ of the writable cache root
MAX_RECORDS = 64  # one per interpreter and sys.path (a script's directory is its first entry)
_SCHEMA = 1

Wheels = list[tuple[installed.KernelEntryPoint, "Path | None"]]  # entry point, package (None: not importable)
Found = tuple[dict[str, installed.Installed], Wheels]


def _identity(entry: str) -> list[int] | None:
    try:
        st = os.stat(entry or ".")
    except OSError:
        return None
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
            if identity != _identity(entry) and names != (installed.dist_infos(entry) or []):
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
    if memo is None:
        return scan(group)
    path = list(sys.path)
    name = record_name(sys.executable, path)
    try:
        hit = _from_record(json.loads(memo.read_bytes(("v1", RECORDS_DIR, name))), path)
    except (MissingCacheFile, CacheError, OSError, ValueError):
        hit = None
    if hit is not None:
        return hit
    entries = [(_identity(entry), installed.dist_infos(entry) or []) for entry in path]
    listing = installed.listing_of((entry, names) for entry, (_, names) in zip(path, entries))
    wheels = _wheels_of(group, listing)
    _write(memo.root / "v1" / RECORDS_DIR, name, {
        "schema": _SCHEMA, "python": sys.executable, "path": path, "entries": entries,
        "wheels": [[ep.name, ep.value, ep.distribution, ep.version, str(p) if p else None] for ep, p in wheels]})
    return listing, wheels


def _write(directory: Path, name: str, record: dict[str, Any]) -> None:
    """Best effort, without fsync (a record lost in a crash is found again); a read-only cache
    stays unwritten; the oldest records beyond MAX_RECORDS go."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, directory / name)
        records = list(directory.glob("*.json"))
        if len(records) > MAX_RECORDS:
            records.sort(key=lambda p: p.stat().st_mtime_ns)
            for old in records[:-MAX_RECORDS]:
                old.unlink(missing_ok=True)
    except OSError:
        pass
