"""`kernelforge build`: compile every selected variant into the cache, in parallel."""
from __future__ import annotations

from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..cache import CacheStore
from ..config import resolve_cache_root, resolve_spec_paths, tuning_dir_for
from ..errors import KernelforgeError


def build(
    spec: Optional[List[str]] = typer.Option(None, "--spec", help="Spec file(s); default: the package's kernelforge/data/specs/*.toml."),
    arch: Optional[List[str]] = typer.Option(None, "--arch", help="Only these arches (e.g. sm_90a)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Worker processes (default: CPU count)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Only variants whose name matches this glob."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every variant's outcome."),
) -> None:
    """Compile every enumerated variant ahead of time (no GPU needed) into the versioned cache."""
    from ..build.driver import build_variants
    from ..spec import load_specs, select

    out, err = Console(), Console(stderr=True)
    try:
        paths = resolve_spec_paths(spec)
        variants = select(load_specs(paths), only=only, archs=arch)
        root, source = resolve_cache_root(cache)
    except (KernelforgeError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2)
    out.print(f"cache: {root} ({source}); {len(variants)} variant(s) from {len(paths)} spec file(s)", highlight=False)
    if not variants:
        err.print("error: no variant matches the selection (--only/--arch)")
        raise typer.Exit(2)
    store = CacheStore(root)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=out, transient=False) as progress:
        task = progress.add_task("building", total=None)

        def on_start(n: int) -> None:
            progress.update(task, total=n, description=f"compiling {n} variant(s)")

        def on_result(r) -> None:
            if r.status == "up to date":
                return
            progress.advance(task)
            if r.status == "failed":
                progress.console.print(f"[red]FAILED[/red] {r.name} ({r.seconds:.2f}s)\n{r.error}", highlight=False)
            elif verbose:
                progress.console.print(f"built {r.name} in {r.seconds:.2f}s", highlight=False)

        try:
            report = build_variants(variants, store, jobs=jobs, on_result=on_result, on_start=on_start)
        except KernelforgeError as exc:
            err.print(f"error: {exc}", highlight=False)
            raise typer.Exit(2)
    built = [r for r in report.results if r.status == "built"]
    if built:
        times = sorted(r.seconds for r in built)
        out.print(f"compile time per variant: min {times[0]:.2f}s, median {times[len(times) // 2]:.2f}s, "
                  f"max {times[-1]:.2f}s", highlight=False)
    out.print(f"built {report.count('built')}, up to date {report.count('up to date')}, "
              f"failed {report.count('failed')} in {report.seconds:.1f}s", highlight=False)
    from .tune import import_table

    for table in sorted({tuning_dir_for(p) for p in paths}):
        for path in sorted(table.glob("*.json")) if table.is_dir() else ():
            try:
                out.print(f"tuning table {path.name}: {import_table(store, path)}", highlight=False)
            except ValueError as exc:
                err.print(f"error: {exc}", highlight=False)
                raise typer.Exit(1)
    if report.failed:
        for r in report.failed:
            err.print(f"failed: {r.name}", highlight=False)
        raise typer.Exit(1)
