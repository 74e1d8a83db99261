"""Dispatch views: the runtime's per-group read of the index (written by the store, read by the
runtime, checked by `cache verify`). The index stays the only source of truth."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from kernelforge.cache.read.fsio import atomic_write_text, read_regular
from kernelforge.cache.read.layout import INDEX_NAME, SCHEMA_VERSION, Layout
from kernelforge.cache.read.trust import MissingCacheFile, TrustedRoot
from kernelforge.errors import CacheError

# Dispatch views: what the runtime needs of the index, split by dispatch group (op and
# coordinates), so a process's first call parses a few KB instead of the whole index, whose parse
# would dominate that call (docs/performance.md). `dispatch/manifest.json` records
# the generation of the index it was derived from (which survives copying the cache, unlike
# an mtime) and its size, and names each group's file, which is content-addressed (its name is
# the sha256 of its bytes, checked on every read): publishing one entry writes one new group file
# and the manifest. A manifest that does not match the current index (an older writer, a crash
# between the two writes, a truncated index) or a group file whose bytes do not match its name
# is ignored and the runtime reads the index itself, so the index stays the only source of truth.
VIEWS_DIR = "dispatch"
MANIFEST = "manifest.json"
# The generation id an index starts with (`index.index_text`), read from its first bytes.
GENERATION = re.compile(rb'^\{"generation": "([0-9a-f]{32})"')
_VIEW_FIELDS = ("kind", "name", "op", "arch", "created", "source_hash", "path", "main_file")


def coords_id(op: str, dispatch: dict[str, Any]) -> str:
    """The key of one dispatch group: op and its sorted dispatch coordinates."""
    return op + "|" + ",".join(f"{k}={dispatch[k]}" for k in sorted(dispatch))


def entry_group(entry: dict[str, Any]) -> str:
    """The dispatch group of an index entry (its op and the dispatch coordinates it records)."""
    return coords_id(entry.get("op", ""), (entry.get("extra") or {}).get("dispatch") or {})


def _compact(key: str, data: dict[str, Any]) -> dict[str, Any] | None:
    try:
        sha = data["files"][data["main_file"]]["sha256"]
    except (KeyError, TypeError):
        return None
    extra, variant = data.get("extra") or {}, data.get("variant") or {}
    return {"key": key, **{f: data[f] for f in _VIEW_FIELDS if f in data}, "sha256": sha,
            "variant": {"axes": variant.get("axes") or {}, "kclass": variant.get("kclass") or {}},
            "extra": {f: extra[f] for f in ("symbol", "runtime_key", "dispatch", "origin") if f in extra}}


def dispatch_views(entries: dict[str, dict[str, Any]], generation: str,
                   index_size: int) -> tuple[dict[str, str], dict[str, Any]]:
    """The views of an index: ({group file name: its bytes}, manifest object)."""
    runtimes: dict[str, dict[str, Any]] = {}
    tuning: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for key, data in entries.items():
        c = _compact(key, data) if isinstance(data, dict) else None
        if c is None:
            continue
        if data.get("kind") == "runtime":
            runtimes[key] = c
        elif data.get("kind") == "tuning":
            tuning[key] = c
        elif isinstance(data.get("op"), str):
            groups.setdefault(coords_id(data["op"], c["extra"].get("dispatch") or {}), []).append(c)
    files: dict[str, str] = {}
    names: dict[str, str] = {}
    for gid in sorted(groups):
        payload = json.dumps({"group": gid, "entries": sorted(groups[gid], key=lambda e: e["key"])},
                             separators=(",", ":"), sort_keys=True)
        names[gid] = group_file_name(payload.encode())
        files[names[gid]] = payload
    manifest = {"schema": SCHEMA_VERSION, "generation": generation, "index_size": index_size,
                "runtimes": runtimes, "tuning": tuning, "groups": names}
    return files, manifest


def group_file_name(payload: bytes) -> str:
    """A group file's content address."""
    return hashlib.sha256(payload).hexdigest()[:24] + ".json"


def write_dispatch_views(index_path: Path, entries: dict[str, dict[str, Any]], generation: str,
                         index_size: int, *, check_groups: bool = False) -> None:
    """Rewrite `dispatch/` next to the index (generation `generation`, `index_size` bytes) from its entries.

    Group files are content-addressed, so an existing one is kept unless `check_groups` asks to
    compare its bytes (repair). Call with the index lock held."""
    files, manifest = dispatch_views(entries, generation, index_size)
    group_dir = index_path.parent / VIEWS_DIR / "groups"
    for name, payload in files.items():
        path = group_dir / name
        if not path.exists() or (check_groups and not _holds(path, payload.encode())):
            if path.is_symlink():
                path.unlink()
            atomic_write_text(path, payload)
    atomic_write_text(index_path.parent / VIEWS_DIR / MANIFEST,
                      json.dumps(manifest, separators=(",", ":"), sort_keys=True))
    for old in group_dir.glob("*.json"):
        if old.name not in files:
            old.unlink(missing_ok=True)


def _holds(path: Path, payload: bytes) -> bool:
    """Whether `path` is a regular file of exactly `payload` (a FIFO or symlink is never opened)."""
    try:
        return read_regular(path, len(payload)) == payload
    except OSError:
        return False


class DispatchViews:
    """The runtime's reader of `dispatch/`: the manifest once, then one small file per group.

    Every file is opened through the trust policy (`TrustedRoot`); an untrusted path raises
    UntrustedCache, anything merely stale or damaged makes the caller read the index instead.
    `signed`: the manifest's bytes as a kernel wheel's signature check read them; then neither
    the index nor the manifest file is read, and the caller never reads the index instead
    (`cache.read.wheel_signature`).
    """

    def __init__(self, root: str | os.PathLike[str], trusted: TrustedRoot | None = None,
                 signed: bytes | None = None) -> None:
        self.trusted = trusted or TrustedRoot(root)
        self.manifest: dict[str, Any] | None = None
        self.signed = signed is not None
        schema = f"v{SCHEMA_VERSION}"
        if signed is not None:
            try:
                data = json.loads(signed)
            except ValueError:
                return
            if _usable(data):
                self.manifest = data
            return
        try:
            fd = self.trusted.open_file((schema, INDEX_NAME))
        except MissingCacheFile:
            return
        with os.fdopen(fd, "rb") as f:
            m = GENERATION.match(f.read(64))
            size = os.fstat(f.fileno()).st_size
        if m is None:
            return
        try:
            data = json.loads(self.trusted.read_bytes((schema, VIEWS_DIR, MANIFEST)))
        except (MissingCacheFile, ValueError):
            return
        if _usable(data) and data.get("generation") == m.group(1).decode() and data.get("index_size") == size:
            self.manifest = data

    def group(self, gid: str) -> list[dict[str, Any]] | None:
        """The entries of dispatch group `gid` ([] if it has none), or None if its file is unusable."""
        assert self.manifest is not None
        name = self.manifest["groups"].get(gid)
        if name is None:
            return []
        try:
            payload = self.trusted.read_bytes((f"v{SCHEMA_VERSION}", VIEWS_DIR, "groups", name))
        except (MissingCacheFile, CacheError):
            return None  # replaced by a concurrent writer, or a bad name: the caller reads the index
        if group_file_name(payload) != name:
            return None  # not the bytes the manifest names
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("group") != gid or not isinstance(data.get("entries"), list):
            return None
        return data["entries"]


def _usable(data: Any) -> bool:
    return (isinstance(data, dict) and data.get("schema") == SCHEMA_VERSION
            and isinstance(data.get("groups"), dict) and isinstance(data.get("runtimes"), dict))


def with_main_path(layout: Layout, entry: dict[str, Any]) -> dict[str, Any] | None:
    """`entry` plus "main_path", its main file where the key says it lives (None: no valid key/kind).

    The stored "path" is not used: the loader refuses entries whose stored path differs."""
    try:
        # os.path.join, not pathlib's `/` (slower per candidate, paid for every build of a
        # dispatch group on an op's first call)
        rel = Layout.entry_rel_of(entry["key"], entry["kind"])
        return {**entry, "main_path": os.path.join(layout.schema_root, rel, entry["main_file"])}
    except (KeyError, TypeError, ValueError, CacheError):
        return None


