"""Tuning tables as cache entries: their key, publishing one, importing a committed table file.

The runtime only reads tables (`kernelforge.runtime.tuning`); writing them is the tuner's and
the build's business, so it lives here, above the runtime.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..cache import CacheStore
from ..cache.read.fsio import ARTIFACT_LIMIT_ENV, max_artifact_bytes, read_regular, write_failure
from ..cache.read.table_schema import TableSchemaError, validate_table
from ..errors import CacheError, CacheNotWritable
from .freshness import entry_damage


def table_key(data: dict[str, Any]) -> str:
    """The cache key of a tuning table: the sha256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def publish_table(store: CacheStore, data: dict[str, Any]) -> str:
    """Publish a tuning table into the cache as an entry of kind "tuning"; return its key.

    Raises TableSchemaError (a ValueError) naming the key path if `data` is not a tuning table,
    CacheError in one line if the cache cannot take it (a full disk: nothing of it is left behind)."""
    validate_table(data)
    key = table_key(data)
    slug = "".join(ch if ch.isalnum() else "_" for ch in data["device"]).strip("_").lower()
    name = f"tuning.{slug}.{data['arch']}"
    staging = None
    try:
        staging = store.staging_dir()
        # What the runtime parses on a process's first call, compact and without the per-candidate
        # timings (a smaller parse on that call), which go to a file of their own.
        lean = {k: v for k, v in data.items() if k != "timings_us"}
        timings = data.get("timings_us", {})
        if "staging" in data:  # the staging rule's timings too: `staging_timings_us` in the timings file
            lean["staging"] = {"min_elements": data["staging"]["min_elements"]}
            timings = {**timings, "staging_timings_us": data["staging"].get("timings_us", {})}
        (staging / "table.json").write_text(json.dumps(lean, separators=(",", ":"), sort_keys=True),
                                            encoding="utf-8")
        (staging / "timings.json").write_text(json.dumps(timings, indent=1, sort_keys=True), encoding="utf-8")
        # The table names builds by their tuning values, not by key, so it stays valid for any
        # toolchain that builds the same kernel sources (the runtime checks those per op).
        store.publish(key, staging, kind="tuning", op="tuning", name=name,
                      variant={"axes": {"device": data["device"], "arch": data["arch"], "measured": data["created"],
                                        "sources": data["sources"]}, "kclass": {}},
                      arch=data["arch"], toolchain_id=data.get("toolchain_id", ""), toolchain={}, source_hash="",
                      main_file="table.json", build_time_s=0.0)
    except OSError as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise CacheError(write_failure(exc, f"tuning table {name} into the cache {store.root}")) from None
    return key


def read_table_file(path: Path) -> dict[str, Any]:
    """A tuning-table file, read and validated. Raises ValueError in one line naming the file."""
    try:
        data = json.loads(read_regular(path, max_artifact_bytes(), follow=True, limit_env=ARTIFACT_LIMIT_ENV))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not a kernelforge tuning table (not JSON: {exc})") from None
    try:
        validate_table(data)
    except TableSchemaError as exc:
        raise ValueError(f"{path}: not a kernelforge tuning table ({exc})") from None
    return data


def import_table(store: CacheStore, path: Path, *, verify: bool = False) -> str:
    """Publish a tuning-table file into the cache (validated first) unless an intact copy is
    already there (nothing is written then); return a line saying which.

    Raises ValueError for a file that is not a tuning table, CacheNotWritable if it must be
    written and cannot."""
    data = read_table_file(path)
    name = f"tuning.{data['device']}.{data['arch']}"
    key = table_key(data)
    entry = store.get(key)
    damage = entry_damage(store, entry, deep=verify) if entry is not None else None
    if entry is not None and damage is None:
        return f"{name} (up to date)"
    problem = store.writable_problem()
    if problem:
        raise CacheNotWritable(f"{problem}: tuning table {Path(path).name} is not in it")
    if damage is not None:
        store.quarantine_entry(key, damage)
    publish_table(store, data)
    return f"{name} (imported{'; replaced a damaged copy' if damage else ''})"
