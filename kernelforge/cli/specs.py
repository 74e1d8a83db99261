"""`kernelforge specs ...`: inspect the variants the spec files enumerate."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from kernelforge.spec import Variant
from kernelforge.spec.files import resolve_spec_paths

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


def _summary(variants: list[Variant]) -> Table:
    """One row per (spec file, op, arch): variant count, K-classes, and each axis's values (wraps to fit)."""
    groups: dict[tuple[str, str, str], list[Variant]] = {}
    for v in variants:
        groups.setdefault((Path(v.spec_file).name, v.op, str(v.get("arch"))), []).append(v)
    table = Table(box=None, pad_edge=False)
    for header, kw in (("op", {"no_wrap": True}), ("arch", {"no_wrap": True}), ("variants", {"justify": "right"}),
                       ("K-classes", {}), ("axes", {"overflow": "fold"})):
        table.add_column(header, **kw)
    for (_spec_name, op, arch), members in groups.items():
        values: dict[str, list[str]] = {}
        for v in members:
            for a, val in v.coords:
                if a in ("arch", "kclass"):
                    continue
                if str(val) not in values.setdefault(a, []):
                    values[a].append(str(val))
        kclasses = sorted({v.kclass.name for v in members})
        table.add_row(op, arch, str(len(members)), ",".join(kclasses),
                      " ".join(f"{a}={','.join(vals)}" for a, vals in values.items()))
    return table


def _nearest_names_hint(pattern: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.5)
    return f"; close names: {', '.join(close)}" if close else ""


@app.command()
def show(
    spec: list[str] | None = typer.Option(
        None, "--spec", help="Spec file or directory of *.toml (repeatable). Default: $KERNELFORGE_SPEC_DIR/*.toml, "
        "else every op family's own spec files (kernelforge/families/*/spec.toml and the plugins')."),
    only: list[str] | None = typer.Option(
        None, "--only", help="Glob on variant names (repeatable; any match keeps a variant)."),
    arch: list[str] | None = typer.Option(None, "--arch", help="Keep only this arch (repeatable)."),
    wide: bool = typer.Option(False, "--wide", help="One row per variant with every axis (wider than a terminal)."),
    format: OutputFormat = typer.Option(OutputFormat.table, "--format", help="Output format."),
) -> None:
    """Summarise the variants the spec files enumerate (per spec file, op and arch); --wide lists
    every variant with every axis; --format json gives every variant.

    Exit codes: 0 shown, 2 bad spec files or arguments, or a selection matching nothing."""
    from kernelforge.cli._common import fail, out_console, select_or_exit

    try:
        paths: list[Path] = resolve_spec_paths(spec)
    except ValueError as e:  # no spec files found
        fail(str(e))
    variants = select_or_exit(paths, only, arch)
    count = f"{len(variants)} variants from {len(paths)} spec file(s)"
    if format is OutputFormat.json:
        from .json_schemas import emit

        emit("specs_show", {"count": len(variants), "spec_files": [str(p) for p in paths],
                            "variants": [_variant_json(v) for v in variants]})
        return
    console = out_console()  # not a terminal (a file, a pipe): never wrapped
    if not wide:
        console.print(_summary(variants))
        console.print(f"{count}; --wide lists every variant, --format json every field", highlight=False)
        return
    table = _table(variants)
    # Never squeeze the columns: ellipsized names and values are useless here (--wide asked for it).
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    width = max(console.width, natural)
    Console(width=width, highlight=False).print(table)
    console.print(count)
