"""`kernelforge tune`: time every build candidate on this GPU; store the winners in the cache."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..cache import CacheStore
from ..config import resolve_cache_root
from ..errors import KernelforgeError


def tune(
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    device_name: Optional[str] = typer.Option(None, "--device-name",
                                              help="Label the table with this device name (default: the GPU's)."),
    only: str = typer.Option("*", "--only", help="Only dispatch groups matching this glob, e.g. 'quantize|*'."),
    export: Optional[Path] = typer.Option(None, "--export", help="Also write the table to this JSON file."),
    import_: Optional[List[Path]] = typer.Option(None, "--import",
                                                 help="Publish these table files into the cache (no GPU; no tuning)."),
) -> None:
    """Time every candidate build over M buckets on this GPU and publish a tuning table into the cache."""
    root, source = resolve_cache_root(cache)
    store = CacheStore(root)
    if import_:
        for path in import_:
            try:
                n = import_table(store, path)
            except (ValueError, KernelforgeError) as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
            typer.echo(f"imported {path} into {root} ({source}) as {n}")
        return
    import torch

    if not torch.cuda.is_available():
        typer.echo("error: kernelforge tune needs a CUDA GPU (it times the cached kernels)", err=True)
        raise typer.Exit(2)
    from ..runtime.tuner import tune as run
    from ..runtime.tuning import publish_table

    data = run(root, device_name, only, log=typer.echo)
    if not data["choices"]:
        typer.echo("error: nothing to tune: no K-class has two or more cached builds for this GPU", err=True)
        raise typer.Exit(1)
    key = publish_table(store, data)
    typer.echo(f"tuning table for {data['device']} / {data['arch']}: {sum(map(len, data['choices'].values()))} "
               f"K-classes of {len(data['choices'])} dispatch groups; cache entry {key[:12]} in {root} ({source})")
    if export:
        export.parent.mkdir(parents=True, exist_ok=True)
        export.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        typer.echo(f"wrote {export}")


def import_table(store: CacheStore, path: Path, *, verify: bool = False) -> str:
    """Publish a tuning-table file into the cache (validated first) unless an intact copy is
    already there (nothing is written then); return a line saying which.

    Raises ValueError for a file that is not a tuning table, CacheNotWritable if it must be
    written and cannot."""
    from ..build.freshness import entry_damage
    from ..errors import CacheNotWritable
    from ..runtime.tuning import TuningTable, publish_table, table_key

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        TuningTable(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a kernelforge tuning table ({exc})") from None
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
