"""Size and age management (like `ccache -M` / `--evict-older-than`, `uv cache prune`).

`gc` evicts kernels least recently used first: last use is the newest `load`/`hit` the usage
records hold for the key (see read/usage.py), else the entry's build time. A runtime library goes
only when no kept kernel links it (as in cleaning.py); tuning tables (a few KB, hard to remake
without a GPU) are never evicted by size or age (`clean --all` removes them). Entries leave
through `CacheStore.remove` (index first, then directories, under the key locks). Only the
given store is touched: installed kernel wheels are never garbage-collected.

Sizes are what `du --apparent-size` would count for the whole root (entries, index, dispatch
views, usage records, locks, staging and quarantine), so `--max-size 1G` bounds the directory.
The limit configured with `cache limit` lives in `<root>/v1/config.json`.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from kernelforge.cache.maintenance.usage_summary import fold, read_usage
from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import atomic_write_text, parse_size, read_regular
from kernelforge.cache.store import CacheStore

LIMIT_ENV = "KERNELFORGE_CACHE_MAX_SIZE"
CONFIG_NAME = "config.json"
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGE_DAYS = 36_500  # 100 years


def parse_age(text: str) -> int:
    """'7d' -> seconds (units s, m, h, d, w: required, as `30` alone is ambiguous). ValueError when
    unparsable, without a unit, or over MAX_AGE_DAYS."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", str(text), re.ASCII)
    if not m:
        raise ValueError(f"age {text!r}: expected a number (ASCII digits) with a unit s, m, h, d or w "
                         "(e.g. 30d, 12h, 45m, 90s)")
    if not m.group(2):
        raise ValueError(f"age {text!r}: add a unit: {m.group(1)}d (days), {m.group(1)}h, {m.group(1)}m "
                         f"or {m.group(1)}s")
    seconds = float(m.group(1)) * _AGE_UNITS[m.group(2)]
    if not seconds <= MAX_AGE_DAYS * 86400:
        raise ValueError(f"age {text!r}: out of range (at most {MAX_AGE_DAYS}d)")
    return int(seconds)


def tree_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, disk bytes as du counts them) of every file below `path` (symlinks not followed)."""
    apparent = disk = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def read_limit(store: CacheStore) -> int | None:
    """The size limit configured in the cache (`cache limit`), or None."""
    try:
        value = json.loads(read_regular(store.layout.schema_root / CONFIG_NAME, 1 << 16)).get("max_size")
        return int(value) if value else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write_limit(store: CacheStore, max_size: int | None) -> None:
    atomic_write_text(store.layout.schema_root / CONFIG_NAME, json.dumps({"max_size": max_size}) + "\n")


def effective_limit(store: CacheStore, cli_value: str | None = None) -> tuple[int | None, str]:
    """(limit in bytes, where it came from): the CLI's, else $KERNELFORGE_CACHE_MAX_SIZE, else the
    cache's config.json, else (None, "none"). ValueError naming where an unparsable value came from."""
    for value, source in ((cli_value, "--max-size"), (os.environ.get(LIMIT_ENV, ""), f"${LIMIT_ENV}")):
        if value:
            try:
                return parse_size(value), source
            except ValueError as exc:
                raise ValueError(f"{source}: {exc}") from None
    limit = read_limit(store)
    return (limit, f"{store.layout.schema_root / CONFIG_NAME}") if limit else (None, "none")


def _created_ts(entry: Entry) -> int:
    try:
        return int(datetime.fromisoformat(entry.created).timestamp())
    except (ValueError, TypeError):
        return 0


@dataclass
class GcReport:
    """What gc removed (or would remove, with dry_run), and the sizes before and after."""

    root: Path
    bytes_before: int = 0
    bytes_after: int = 0
    max_size: int | None = None
    older_than_s: int | None = None
    removed: list[dict[str, Any]] = field(default_factory=list)  # name, key, kind, bytes, last_use, why
    kept: int = 0
    over_limit: bool = False  # still over max_size (everything left is protected or a tuning table)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "max_size": self.max_size, "older_than_s": self.older_than_s, "removed": self.removed,
                "kept": self.kept, "over_limit": self.over_limit, "dry_run": self.dry_run}


def last_uses(store: CacheStore, entries: Iterable[Entry], writable: bool) -> dict[str, int]:
    """Last use per key: the usage records (folded first where the cache is writable), else build time."""
    usage = fold(store.root) if writable else read_usage(store.root)
    return {e.key: max(usage.last_use.get(e.key, 0), _created_ts(e)) for e in entries}


def gc(store: CacheStore, *, max_size: int | None = None, older_than_s: int | None = None,
       protect: Iterable[str] = (), dry_run: bool = False, now: float | None = None) -> GcReport:
    """Evict least recently used kernels until the root is at most `max_size` bytes, and every kernel
    unused for `older_than_s`; runtime libraries only once no kept kernel links them. `protect`
    lists keys never evicted (e.g. what a build just selected)."""
    now = time.time() if now is None else now
    report = GcReport(store.root, max_size=max_size, older_than_s=older_than_s, dry_run=dry_run)
    report.bytes_before = tree_bytes(store.root)[0]
    entries = store.index(fresh=True)
    used = last_uses(store, entries.values(), writable=not dry_run)
    protected = set(protect)
    dir_bytes = {k: tree_bytes(store.entry_dir(e))[0] for k, e in entries.items()}
    kernels = sorted((e for e in entries.values() if e.kind == "kernel" and e.key not in protected),
                     key=lambda e: (used[e.key], e.key))
    links: dict[str, set[str]] = {}
    for e in entries.values():
        if e.kind == "kernel":
            links.setdefault(e.extra.get("runtime_key", ""), set()).add(e.key)
    doomed: dict[str, str] = {}
    total = report.bytes_before

    def evict(entry: Entry, why: str) -> None:
        nonlocal total
        doomed[entry.key] = why
        total -= dir_bytes[entry.key]
        rkey = entry.extra.get("runtime_key", "")
        rt = entries.get(rkey)
        if rt is not None and rkey not in protected and rkey not in doomed and links.get(rkey, set()) <= set(doomed):
            doomed[rkey] = "no kept kernel links it"
            total -= dir_bytes[rkey]

    if older_than_s is not None:
        for e in kernels:
            if now - used[e.key] > older_than_s:
                evict(e, f"unused for {_age(now - used[e.key])}")
    if max_size is not None:
        # Runtime libraries no kernel links at all go first, then kernels, least recently used first.
        for e in sorted((e for e in entries.values() if e.kind == "runtime" and not links.get(e.key)
                         and e.key not in protected), key=lambda e: used[e.key]):
            if total <= max_size:
                break
            doomed[e.key] = "no kernel links it"
            total -= dir_bytes[e.key]
        for e in kernels:
            if total <= max_size:
                break
            if e.key not in doomed:
                evict(e, f"least recently used (last use {_age(now - used[e.key])} ago)")
        report.over_limit = total > max_size
    for key, why in doomed.items():
        e = entries[key]
        report.removed.append({"name": e.name, "key": key, "kind": e.kind, "op": e.op, "arch": e.arch,
                               "bytes": dir_bytes[key], "last_use": used[key], "why": why})
    # in eviction order
    report.kept = len(entries) - len(doomed)
    if doomed and not dry_run:
        store.remove(doomed)
        fold(store.root, forget=set(doomed))
    report.bytes_after = tree_bytes(store.root)[0] if not dry_run else total
    return report


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f}{unit}"
    return f"{seconds}s"
