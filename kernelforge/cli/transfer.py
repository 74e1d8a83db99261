"""Printing and exit codes of the transfer commands (cache push/pull/export/import, build --remote).

The commands themselves are `kernelforge.cache.transfer.commands.run_transfer` (one body for the
four) called through `run`, whose report `show` renders."""
from __future__ import annotations

from typing import Any, Callable

import typer
from rich.console import Console

from kernelforge.cache.transfer.common import Rejected, TransferReport
from kernelforge.errors import CacheError


def run(fn: Callable[..., TransferReport], *args: Any, **kwargs: Any) -> TransferReport:
    """Call a transfer; one line on stderr and exit 1 (source failed verification) or 2 (cannot run)."""
    try:
        return fn(*args, **kwargs)
    except Rejected as exc:
        Console(stderr=True, highlight=False).print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except CacheError as exc:
        Console(stderr=True, highlight=False).print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None


def show(report: TransferReport, console: Console, *, as_json: bool = False) -> None:
    """Print a report (refusals first, then one summary line); exit 1 if anything was refused or
    the cache failed the verify asked for afterwards (`report.verified`)."""
    if as_json:
        from .json_schemas import emit

        emit(f"cache_{report.action}", {**report.to_dict(), "dry_run": report.dry_run})
    else:
        for note in report.notes:
            console.print(f"note: {note}", markup=False, soft_wrap=True)
        for refusal in report.refused:
            console.print(f"REFUSED: {refusal}", markup=False, soft_wrap=True)
        for name in report.transferred if report.dry_run else ():
            console.print(f"would {report.action} {name}", markup=False, soft_wrap=True)
        moved = f"{report.files} file(s), {report.bytes} bytes"
        what = "would be transferred" if report.dry_run else "transferred"
        console.print(f"{'dry run: ' if report.dry_run else ''}{report.action} {report.source} -> {report.dest}: "
                      f"{len(report.transferred)} entries {what} ({moved}), {len(report.present)} already there, "
                      f"{len(report.refused)} refused, of {report.selected} selected"
                      + ("; nothing was written" if report.dry_run else ""), markup=False, soft_wrap=True)
    if not report.ok or report.verified is False:
        raise typer.Exit(1)
