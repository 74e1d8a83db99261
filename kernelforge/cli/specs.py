"""`kernelforge specs ...`: inspect the variants the spec files enumerate."""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from kernelforge.config import resolve_spec_paths
from kernelforge.spec import Variant, load_specs, select

app = typer.Typer(help="Inspect the kernel variants declared by spec files.", no_args_is_help=True)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def _variant_json(v: Variant) -> dict[str, Any]:
    return {"name": v.name, "symbol": v.symbol, "op": v.op, "spec_file": v.spec_file,
            "axes": dict(v.coords), "kclass": v.kclass.to_dict()}


def _table(variants: list[Variant]) -> Table:
    axes: list[str] = []
    for v in variants:
        axes += [a for a, _ in v.coords if a not in axes]
    table = Table()
    for header in ("name", "op", *axes):
        table.add_column(header, no_wrap=True)
    table.add_column("k_multiple_blocks", justify="right", no_wrap=True)
    table.add_column("vector_bytes", justify="right", no_wrap=True)
    for v in variants:
        values = dict(v.coords)
        table.add_row(v.name, v.op, *(str(values.get(a, "")) for a in axes),
                      str(v.kclass.k_multiple_blocks), str(v.kclass.vector_bytes))
    return table


@app.command()
def show(
    spec: list[str] | None = typer.Option(
        None, "--spec", help="Spec file or directory of *.toml (repeatable). Default: $KERNELFORGE_SPEC_DIR/*.toml, "
        "else the package's kernelforge/data/specs/*.toml."),
    only: list[str] | None = typer.Option(
        None, "--only", help="Glob on variant names (repeatable; any match keeps a variant)."),
    arch: list[str] | None = typer.Option(None, "--arch", help="Keep only this arch (repeatable)."),
    format: OutputFormat = typer.Option(OutputFormat.table, "--format", help="Output format."),
) -> None:
    """List the variants the spec files enumerate, one row per variant."""
    try:
        paths: list[Path] = resolve_spec_paths(spec)
        variants = select(load_specs(paths), only=only, archs=arch)
    except ValueError as e:  # SpecError, or no spec files found
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    count = f"{len(variants)} variants from {len(paths)} spec file(s)"
    if format is OutputFormat.json:
        typer.echo(json.dumps({"count": len(variants), "spec_files": [str(p) for p in paths],
                               "variants": [_variant_json(v) for v in variants]}, indent=2))
        return
    table, console = _table(variants), Console()
    # Never squeeze the columns to the terminal: ellipsized names and values are useless here.
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    width = max(console.width, natural)
    Console(width=width).print(table)
    console.print(count)
