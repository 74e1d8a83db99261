"""index.json: read it tolerantly, write it atomically.

The index is the cache's commit marker: an entry exists only once its key is in the index. Format:
`{"schema": 1, "entries": {key: Entry.to_json()}}`.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from kernelforge.cache.layout import SCHEMA_VERSION, Layout
from kernelforge.errors import CacheError


def read_index_checked(path: Path) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(raw entries, problem): missing -> ({}, None); unreadable or corrupt -> ({}, a message saying why)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"kernelforge cache index {path} is unreadable ({exc}); treating the cache as empty"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, f"kernelforge cache index {path} is corrupt ({exc}); treating the cache as empty"
    if (not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION
            or not isinstance(data.get("entries"), dict)):
        return {}, f"kernelforge cache index {path} has an unexpected layout; treating the cache as empty"
    return data["entries"], None


def read_index(path: Path) -> dict[str, dict[str, Any]]:
    """The raw entries of the index at `path`; missing -> {}, unreadable or corrupt -> {} with a warning."""
    entries, problem = read_index_checked(path)
    if problem:
        warnings.warn(problem, RuntimeWarning, stacklevel=2)
    return entries


def write_index(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Replace the index at `path` atomically (temp file in the same dir, fsync, os.replace, fsync dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"schema": SCHEMA_VERSION, "entries": entries}, indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a power loss (best effort off Linux)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_index_for_runtime(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The one cheap read the runtime does: a single json load, no directory scans.

    Returns key -> the entry's JSON object, plus "main_path" (absolute path of its main file, str)
    and "sha256" (of the main file). Malformed entries are skipped; a missing index gives {}.
    """
    layout = Layout(Path(root))
    out: dict[str, dict[str, Any]] = {}
    for key, data in read_index(layout.index).items():
        try:
            main_file = data["main_file"]
            out[key] = {**data, "main_path": str(layout.resolve(data["path"]) / main_file),
                        "sha256": data["files"][main_file]["sha256"]}
        except (KeyError, TypeError, ValueError, CacheError):
            continue
    return out
