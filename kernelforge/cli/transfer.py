"""Printing and exit codes of the transfer commands (cache push/pull/export/import, build --remote)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import typer
from rich.console import Console

from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer import Rejected, TransferReport
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
    """Print a report (refusals first, then one summary line); exit 1 if anything was refused."""
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
    if not report.ok:
        raise typer.Exit(1)


def build_remote_pushes(url: str, mode: str | None, err: Console) -> bool:
    """`build --remote`, before anything else: whether the build pushes afterwards. `--remote-mode pull`
    never writes the remote; a read-only remote (http/https) is pull-only by default, with a note, and
    `--remote-mode read-write` on one is a user error (exit 2). A bad URL or missing backend exits 2."""
    from kernelforge.cache.remote import Remote

    if mode == "pull":
        return False
    try:
        remote = Remote(url)
    except CacheError as exc:
        err.print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if not remote.read_only:
        return True
    if mode == "read-write":
        err.print(f"error: remote {url} is read-only (http/https can only be pulled from): --remote-mode "
                  "read-write cannot push to it; use --remote-mode pull, or a file://, s3:// or gs:// URL",
                  markup=False, soft_wrap=True)
        raise typer.Exit(2)
    err.print(f"note: remote {url} is read-only (http/https): pull only, nothing is pushed (--remote-mode pull)",
              markup=False, soft_wrap=True)
    return False


def build_pull(store: CacheStore, url: str, variants: Sequence[Any], console: Console) -> set[str]:
    """`build --remote`, before compiling: pull the selection's missing keys; returns the keys.
    Refused entries are reported and then built locally."""
    from kernelforge.build.selection import selection_keys
    from kernelforge.cache.remote import pull

    keys = selection_keys(variants)
    report = run(pull, store, url, keys=keys, missing_ok=True)
    try:
        show(report, console)
    except typer.Exit:
        console.print("the refused entries will be built locally", markup=False)
    return keys


def build_push(store: CacheStore, url: str, keys: set[str], console: Console) -> None:
    """`build --remote`, after compiling: push the selection's entries the remote lacks (exit 1 on refusals)."""
    from kernelforge.cache.remote import push

    show(run(push, store, url, keys=keys), console)
