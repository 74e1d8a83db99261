"""Which selected variants the cache really holds: cheap checks on every build, a re-hash on request.

An indexed entry counts as up to date only if its files are still regular files of the
recorded sizes (a stat each: a no-op build of the whole catalog stays fast) and, with
`--verify`, of the recorded sha256 and matching its meta.json. A damaged entry is moved to
quarantine/ and dropped from the index, so the build republishes it; nothing is deleted.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..cache import CacheStore, Entry
from ..cache.maintenance.verification import entry_file_problems


@dataclass
class Freshness:
    """The split of a keyed selection: what is up to date, what must be (re)built, and why."""

    fresh: list[tuple[Any, str]] = field(default_factory=list)
    todo: list[tuple[Any, str]] = field(default_factory=list)
    damaged: list[tuple[str, str, str]] = field(default_factory=list)  # (key, name, reason)
    runtime_missing: bool = False  # an up-to-date kernel links a runtime library the cache lacks

    @property
    def writes(self) -> bool:
        """Whether acting on this needs to write the cache."""
        return bool(self.todo or self.damaged or self.runtime_missing)

    def quarantine_damaged(self, store: CacheStore) -> None:
        """Move the damaged entries to quarantine/ (and out of the index) so they are rebuilt."""
        for key, _, reason in self.damaged:
            store.quarantine_entry(key, reason)


def entry_damage(store: CacheStore, entry: Entry, *, deep: bool) -> str | None:
    """Why an indexed entry's files cannot be served (None: they can, as far as checked)."""
    directory = store.entry_dir(entry)
    if deep:
        problems = entry_file_problems(store, entry, directory)
        return "; ".join(" ".join(x for x in p if x) for p in problems) or None
    for rel, info in entry.files.items():
        try:
            st = os.lstat(directory / rel)
        except OSError:
            return f"missing file {rel}"
        if not stat.S_ISREG(st.st_mode) or st.st_size != int(info["size"]):
            return f"{rel} is not a regular file of {info['size']} bytes"
    return None


def check_selection(store: CacheStore, keyed: Sequence[tuple[Any, str]], runtime_key: str, *,
                    deep: bool = False) -> Freshness:
    """Split `keyed` ((variant, key) pairs) into fresh and to-build; damaged entries (and a damaged
    runtime library `runtime_key`) are listed for `quarantine_damaged`. Reads only."""
    out = Freshness()
    index = store.index()
    checked_runtime = False
    for variant, key in keyed:
        entry = index.get(key)
        reason = entry_damage(store, entry, deep=deep) if entry is not None else None
        if entry is not None and reason is not None:
            out.damaged.append((key, entry.name, reason))
        if entry is None or reason is not None:
            out.todo.append((variant, key))
            continue
        out.fresh.append((variant, key))
        if not checked_runtime and entry.extra.get("runtime_key") == runtime_key:
            checked_runtime = True
            rt = index.get(runtime_key)
            damage = entry_damage(store, rt, deep=deep) if rt is not None else "not in the index"
            if rt is not None and damage is not None:
                out.damaged.append((runtime_key, rt.name, damage))
            out.runtime_missing = damage is not None
    return out
