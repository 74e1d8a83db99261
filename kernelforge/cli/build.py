"""`kernelforge build`: compile every selected variant into the cache, in parallel.

Exit codes: 0 all built, 1 a variant failed, 2 bad arguments, 130 interrupted by Ctrl-C
(SIGINT), 143 terminated by SIGTERM. An interrupted build stops its workers at once; what was
published stays, so running the same command again builds only what is missing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..cache import CacheStore
from ..config import resolve_cache_root, resolve_spec_paths, tuning_dir_for
from ..errors import KernelforgeError


@dataclass
class _Tally:
    """How far the build got, for the one line an interrupt prints."""

    total: int | None = None
    built: int = 0

    def line(self, what: str) -> str:
        done = f"built {self.built} of {self.total}" if self.total is not None else "nothing built yet"
        return f"{what}: {done}; run the same command to resume"


def build(
    spec: Optional[List[str]] = typer.Option(None, "--spec", help="Spec file(s); default: the package's kernelforge/data/specs/*.toml."),
    arch: Optional[List[str]] = typer.Option(None, "--arch", help="Only these arches (e.g. sm_90a)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Worker processes (default: CPU count)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Only variants whose name matches this glob."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every variant's outcome."),
    verify: bool = typer.Option(False, "--verify", help="Re-hash the cached entries of the selection (and the "
                                "runtime library, tuning tables) and rebuild damaged ones; without it only sizes "
                                "are checked."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Build only shard I of N (1-based, e.g. 2/4) of the "
                                        "selection, partitioned by cache key; every shard builds the runtime library."),
    check_reproducible: bool = typer.Option(False, "--check-reproducible", help="Build nothing: rebuild a sample of "
                                            "the cached variants and the runtime library in a temporary cache and "
                                            "compare bytes (exit 1 on any difference)."),
    sample: int = typer.Option(4, "--sample", min=1, help="Variants --check-reproducible rebuilds (seeded sample)."),
    remote: Optional[str] = typer.Option(None, "--remote", help="fsspec URL: pull the selection's missing "
                                         "entries first, push what the remote lacks afterwards."),
) -> None:
    """Compile every enumerated variant ahead of time (no GPU needed) into the versioned cache.

    Exit codes: 0 all built, 1 a variant failed, 2 bad arguments, 130 Ctrl-C, 143 SIGTERM.
    """
    from ..build.pool import Terminated, sigterm_raises

    tally = _Tally()
    try:
        with sigterm_raises():
            _build(BuildOptions(spec, arch, jobs, cache, only, verbose, verify, shard, check_reproducible, sample,
                                remote), tally)
    except (KeyboardInterrupt, Terminated) as exc:
        what, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        Console(stderr=True).print(tally.line(what), highlight=False)
        raise typer.Exit(code)


@dataclass
class BuildOptions:
    """The command's options, as given."""

    spec: Optional[List[str]]
    arch: Optional[List[str]]
    jobs: Optional[int]
    cache: Optional[str]
    only: Optional[List[str]]
    verbose: bool
    verify: bool
    shard: Optional[str]
    check_reproducible: bool
    sample: int
    remote: Optional[str]


def _build(o: BuildOptions, tally: _Tally) -> None:
    from ..build.driver import build_variants
    from ..build.hermetic import ignored_compile_env
    from ..build.shard import parse_shard
    from ..spec import load_specs, select

    out, err = Console(), Console(stderr=True)
    jobs, verbose, verify = o.jobs, o.verbose, o.verify
    try:
        shard_spec = parse_shard(o.shard) if o.shard is not None else None
        paths = resolve_spec_paths(o.spec)
        variants = select(load_specs(paths), only=o.only, archs=o.arch)
        root, source = resolve_cache_root(o.cache)
    except (KernelforgeError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2)
    out.print(f"cache: {root} ({source}); {len(variants)} variant(s) from {len(paths)} spec file(s)", highlight=False)
    if not variants:
        err.print("error: no variant matches the selection (--only/--arch)")
        raise typer.Exit(2)
    store = CacheStore(root)
    for name in ignored_compile_env():
        err.print(f"note: {name} is ignored: the compile workers drop settings outside the cache key", highlight=False)
    if o.check_reproducible:
        from .release import check_reproducible_cmd

        raise typer.Exit(check_reproducible_cmd(variants, store, sample=o.sample, jobs=jobs, shard=shard_spec,
                                                out=out, err=err))
    if o.remote:
        from .transfer import build_pull

        remote_keys = build_pull(store, o.remote, variants, out)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=out, transient=False) as progress:
        task = progress.add_task("building", total=None)

        def on_start(n: int) -> None:
            tally.total = n
            progress.update(task, total=n, description=f"compiling {n} variant(s)")

        def on_result(r) -> None:
            if r.status == "up to date":
                return
            progress.advance(task)
            tally.built += r.status == "built"
            if r.status == "failed":
                progress.console.print(f"[red]FAILED[/red] {r.name} ({r.seconds:.2f}s)\n{r.error}", highlight=False)
            elif verbose:
                progress.console.print(f"built {r.name} in {r.seconds:.2f}s", highlight=False)

        try:
            report = build_variants(variants, store, jobs=jobs, on_result=on_result, on_start=on_start,
                                    verify=verify, shard=shard_spec)
        except KernelforgeError as exc:
            err.print(f"error: {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
    for name, reason in report.replaced:
        out.print(f"replaced damaged entry {name} ({reason}); the damaged copy is in {store.layout.quarantine}",
                  highlight=False, soft_wrap=True)
    if report.stale_removed:
        out.print(f"removed {report.stale_removed} staging dir(s) left by dead builds", highlight=False)
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
                out.print(f"tuning table {path.name}: {import_table(store, path, verify=verify)}", highlight=False,
                          soft_wrap=True)
            except KernelforgeError as exc:
                err.print(f"error: {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(2)
            except ValueError as exc:
                err.print(f"error: {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(1)
    if o.remote:
        from .transfer import build_push

        build_push(store, o.remote, remote_keys, out)
    if report.failed:
        for r in report.failed:
            err.print(f"failed: {r.name}", highlight=False)
        raise typer.Exit(1)
