"""index.json: read it tolerantly, write it atomically.

The index is the cache's commit marker: an entry exists only once its key is in the index. Format:
`{"schema": 1, "entries": {key: Entry.to_json()}}`.
"""
from __future__ import annotations

import json
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

from kernelforge.cache.read.fsio import atomic_write_text, read_regular
from kernelforge.cache.read.layout import INDEX_NAME, SCHEMA_VERSION, Layout
from kernelforge.cache.read.trust import MissingCacheFile, TrustedRoot
from kernelforge.cache.read.views import GENERATION, write_dispatch_views
from kernelforge.errors import CacheError


def read_index_checked(path: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(raw entries, problem): missing -> ({}, None); unreadable or corrupt -> ({}, a message saying why)."""
    try:
        text = read_regular(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"kernelforge cache index {path} is unreadable ({exc.strerror or exc})"
    return parse_index(text, path)


def parse_index(text: str, path: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(raw entries, problem) of index text read from `path`."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, f"kernelforge cache index {path} is corrupt ({exc})"
    if (not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION
            or not isinstance(data.get("entries"), dict)):
        return {}, f"kernelforge cache index {path} has an unexpected layout"
    return data["entries"], None


def read_index(path: Path) -> dict[str, dict[str, Any]]:
    """The raw entries of the index at `path`; missing -> {}, unreadable or corrupt -> {} with a warning."""
    entries, problem = read_index_checked(path)
    if problem:
        warnings.warn(problem, RuntimeWarning, stacklevel=2)
    return entries


def write_index(path: Path, entries: dict[str, dict[str, Any]], *, check_groups: bool = False) -> None:
    """Replace the index at `path` atomically, then its dispatch views (`kernelforge.cache.read.views`).

    Each write gets a fresh generation id, first in the file so that a reader finds it in
    the first bytes; the views name the generation they were derived from.
    """
    generation = uuid.uuid4().hex
    text = index_text(entries, generation)
    atomic_write_text(path, text)
    write_dispatch_views(path, entries, generation, len(text.encode("utf-8")), check_groups=check_groups)


def index_text(entries: dict[str, dict[str, Any]], generation: str) -> str:
    """The bytes of an index of `entries` with generation id `generation` (32 hex digits): one line
    per entry, keys sorted. Each entry is encoded by json's C encoder, which an `indent` turns off
    (several times slower for the index of the default specs), and every publish outside a batch
    writes the whole index."""
    body = ",\n".join(f"{json.dumps(key)}: {json.dumps(entries[key], sort_keys=True)}" for key in sorted(entries))
    return f'{{"generation": "{generation}",\n"entries": {{\n{body}\n}},\n"schema": {SCHEMA_VERSION}}}'


def index_generation(index_path: Path) -> str | None:
    """The generation id of the index at `index_path` (None: missing, or written without one)."""
    try:
        m = GENERATION.match(read_regular(index_path, 64, head=True))
    except OSError:
        return None
    return m.group(1).decode() if m else None


def load_index_for_runtime(root: str | os.PathLike[str],
                           trusted: TrustedRoot | None = None) -> dict[str, dict[str, Any]]:
    """The runtime's read of the whole index (when the dispatch views cannot be used).

    Returns key -> the entry's JSON object, plus "main_path" (its main file, where its key says
    it lives) and "sha256" (of the main file). Malformed entries are skipped; a missing index
    gives {}; an unreadable or corrupt one raises CacheError naming `kernelforge cache repair`.
    """
    layout = Layout(Path(root))
    trusted = trusted or TrustedRoot(root)
    try:
        text = trusted.read_bytes((f"v{SCHEMA_VERSION}", INDEX_NAME)).decode("utf-8", "replace")
    except MissingCacheFile:
        return {}
    raw, problem = parse_index(text, layout.index)
    if problem:
        raise CacheError(f"{problem}; run `kernelforge cache repair --cache {layout.root}`")
    out: dict[str, dict[str, Any]] = {}
    for key, data in raw.items():
        try:
            main_file = data["main_file"]
            out[key] = {**data, "key": key, "main_path": str(layout.entry_dir(key, data["kind"]) / main_file),
                        "sha256": data["files"][main_file]["sha256"]}
        except (KeyError, TypeError, ValueError, CacheError):
            continue
    return out
