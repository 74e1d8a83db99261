"""`kernelforge tune`: time every build candidate on this GPU; store the winners in the cache."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..build.tables import import_table, read_table_file
from ..cache import CacheStore
from ..config import resolve_cache_root
from ..errors import KernelforgeError


def tune(
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    device_name: Optional[str] = typer.Option(None, "--device-name",
                                              help="Label the table with this device name (default: the GPU's)."),
    only: str = typer.Option("*", "--only", help="Only dispatch groups matching this glob, e.g. 'quantize|*'; "
                             "'quantize_columnwise|*' measures the staging rule of linear scales alone."),
    export: Optional[Path] = typer.Option(None, "--export", help="Also write the table to this JSON file."),
    update: Optional[Path] = typer.Option(
        None, "--update",
        help="A table of this card measured before (e.g. the committed one): keep its choices for the dispatch "
             "groups this run does not measure (see --only); the published and exported table holds both."),
    import_: Optional[List[Path]] = typer.Option(None, "--import",
                                                 help="Publish these table files into the cache (no GPU; no tuning)."),
) -> None:
    """Time every candidate build over M buckets on this GPU, and the columnwise op's staging rule, and publish
    a tuning table into the cache."""
    root, source = resolve_cache_root(cache)
    store = CacheStore(root)
    base = None
    if update is not None:
        if import_:
            typer.echo("error: --update: measures and merges; --import publishes files without measuring", err=True)
            raise typer.Exit(2)
        try:
            base = read_table_file(update)
        except ValueError as exc:
            typer.echo(f"error: --update: {exc}", err=True)
            raise typer.Exit(2) from None
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
    label = device_name or torch.cuda.get_device_name(torch.cuda.current_device())  # what the table records
    if base is not None and base["device"] != label:  # known before minutes of measuring, not after
        typer.echo(f"error: --update: {update}: device: the table to update is for {base['device']!r}, "
                   f"this run measures {label!r}", err=True)
        raise typer.Exit(2)
    from ..build.tables import publish_table
    from ..tuner.measure import tune as run
    from ..tuner.staging import add_staging

    data = add_staging(run(root, device_name, only, log=typer.echo), root, only, log=typer.echo)
    if not data["choices"] and "staging" not in data:
        typer.echo("error: nothing to tune: no K-class has two or more cached builds for this GPU, and no "
                   "columnwise linear-scale path matching --only has both its builds", err=True)
        raise typer.Exit(1)
    if base is not None:
        from ..tuner.merge import merge_tables

        try:
            data, dropped = merge_tables(base, data)
        except ValueError as exc:
            typer.echo(f"error: --update: {update}: {exc}", err=True)
            raise typer.Exit(2) from None
        left_out = f"; left out {len(dropped)} measured on other sources: {', '.join(dropped)}" if dropped else ""
        typer.echo(f"updated {update}: {len(data['choices'])} dispatch groups{left_out}")
    key = publish_table(store, data)
    staged = (f", the staging rule of {len(data['staging']['min_elements'])} linear-scale paths" if "staging" in data
              else "")
    typer.echo(f"tuning table for {data['device']} / {data['arch']}: {sum(map(len, data['choices'].values()))} "
               f"K-classes of {len(data['choices'])} dispatch groups{staged}; cache entry {key[:12]} in "
               f"{root} ({source})")
    if export:
        export.parent.mkdir(parents=True, exist_ok=True)
        export.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        typer.echo(f"wrote {export}")
