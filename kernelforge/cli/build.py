"""`kernelforge build`: compile every selected variant into the cache, in parallel.

Exit codes: 0 all built, 1 a variant failed, 2 bad arguments, 130 interrupted by Ctrl-C
(SIGINT), 143 terminated by SIGTERM. An interrupted build stops its workers at once; what was
published stays, so running the same command again builds only what is missing.

Output: on a terminal a progress bar (ETA, the variant compiling, failures); in a log a plain
progress line every --progress-interval seconds and every 10% (cli/progress.py); `--format json`
prints one machine-readable report on stdout (progress lines then go to stderr).

The command parses and renders: the build itself (pull, compile, tuning tables, gc, push) is
`build.pipeline.run_build`, which returns a `BuildOutcome` that `_BuildView` prints.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console

from ..cache import CacheStore
from ..config import resolve_cache_root, tuning_dir
from ..errors import KernelforgeError
from ..spec.files import resolve_spec_paths
from ._common import EXIT_FAILED, EXIT_USAGE, fail
from .progress import DEFAULT_INTERVAL_S, BarReporter, LineReporter, Reporter

if TYPE_CHECKING:
    from ..build.pipeline import BuildOutcome, TransferReport, VariantResult

PROGRESS_ENV = "KERNELFORGE_PROGRESS_INTERVAL"
MAX_JOBS = 1024  # compile workers take ~1 GB each: more is a typo, not a machine


class BuildFormat(str, Enum):
    text = "text"
    json = "json"


class RemoteMode(str, Enum):
    read_write = "read-write"
    pull = "pull"


@dataclass
class _Tally:
    """How far the build got, for the one line an interrupt prints."""

    total: int | None = None
    built: int = 0

    def line(self, what: str) -> str:
        done = f"built {self.built} of {self.total}" if self.total is not None else "nothing built yet"
        return f"{what}: {done}; run the same command to resume"


def build(
    spec: Optional[List[str]] = typer.Option(None, "--spec", help="Spec file(s) or directories; default: "
                                             "every op family's spec.toml (built-ins and plugins)."),
    arch: Optional[List[str]] = typer.Option(None, "--arch", help="Only these arches (e.g. sm_90a)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Worker processes, 1 to "
                                       f"{MAX_JOBS} (default: CPU count)."),
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Only variants whose name matches this glob."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every variant's outcome and why it is "
                                 "rebuilt (the key ingredient that changed against the nearest cached build)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress; only failures, errors and the summary."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Build nothing: list what would be built and why "
                                 "each is not up to date."),
    fmt: BuildFormat = typer.Option(BuildFormat.text, "--format", help="text, or json: one report on stdout "
                                    "(per variant: status, compile time, peak RSS, reason)."),
    progress_interval: Optional[float] = typer.Option(None, "--progress-interval", min=0.05, help="Seconds between "
                                                      "progress lines when stdout is not a terminal (default: "
                                                      f"${PROGRESS_ENV}, else {DEFAULT_INTERVAL_S:g})."),
    max_size: Optional[str] = typer.Option(None, "--max-size", help="After building, evict least recently used "
                                           "entries to keep the cache under SIZE (default: "
                                           "$KERNELFORGE_CACHE_MAX_SIZE, else the cache's `cache limit`)."),
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
    remote_mode: Optional[RemoteMode] = typer.Option(None, "--remote-mode", help="read-write: pull, build, push; "
                                                     "pull: pull and build, never write the remote (a builder that "
                                                     "may read a shared store but not write it). Default: "
                                                     "read-write, pull for a read-only http(s):// remote."),
) -> None:
    """Compile every enumerated variant ahead of time (no GPU needed) into the versioned cache.

    Exit codes: 0 all built (or up to date), 1 a variant failed, 2 bad arguments or an empty
    selection, 130 Ctrl-C, 143 SIGTERM.
    """
    from ..build.pool import Terminated, sigterm_raises

    tally = _Tally()
    try:
        with sigterm_raises():
            _build(BuildOptions(spec, arch, jobs, cache, only, verbose, verify, shard, check_reproducible, sample,
                                remote, quiet, dry_run, fmt.value, progress_interval, max_size,
                                remote_mode.value if remote_mode is not None else None), tally)
    except (KeyboardInterrupt, Terminated) as exc:
        what, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        Console(stderr=True, soft_wrap=True).print(tally.line(what), highlight=False, markup=False)
        raise typer.Exit(code) from None


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
    quiet: bool = False
    dry_run: bool = False
    format: str = "text"
    progress_interval: Optional[float] = None
    max_size: Optional[str] = None
    remote_mode: Optional[str] = None  # None: read-write, pull for a read-only remote


def _interval(o: BuildOptions) -> float:
    if o.progress_interval is not None:
        return o.progress_interval
    try:
        return max(0.05, float(os.environ.get(PROGRESS_ENV) or DEFAULT_INTERVAL_S))
    except ValueError:
        fail(f"${PROGRESS_ENV}={os.environ.get(PROGRESS_ENV)!r}: expected a number of seconds")


def _reporter(o: BuildOptions, out: Console) -> Reporter:
    if o.quiet:
        return Reporter()
    if o.format == "json":
        return LineReporter(sys.stderr, _interval(o))
    if out.is_terminal:
        return BarReporter(out)
    return LineReporter(sys.stdout, _interval(o))


def _build(o: BuildOptions, tally: _Tally) -> None:
    from ..build.hermetic import ignored_compile_env
    from ..build.shard import parse_shard
    from ._common import select_or_exit

    as_json = o.format == "json"
    # soft_wrap: a log keeps whole lines (`tuning table ...: tuning.NVIDIA H100 80GB HBM3.sm_90a`).
    out = Console(highlight=False, soft_wrap=True, stderr=as_json)  # json: stdout holds the report alone
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if o.jobs is not None and not 1 <= o.jobs <= MAX_JOBS:
        fail(f"--jobs {o.jobs}: expected a number of worker processes from 1 to {MAX_JOBS}")
    try:
        shard_spec = parse_shard(o.shard) if o.shard is not None else None
        paths = resolve_spec_paths(o.spec)
        root, source = resolve_cache_root(o.cache)
    except (KernelforgeError, ValueError) as exc:
        fail(str(exc))
    variants = select_or_exit(paths, o.only, o.arch)
    if o.remote_mode is not None and not o.remote:
        fail("--remote-mode needs --remote URL")
    # exit 2 before building anything
    push = bool(o.remote) and not o.check_reproducible and not o.dry_run and _pushes(o.remote, o.remote_mode, err)
    if not o.quiet:
        out.print(f"cache: {root} ({source}); {len(variants)} variant(s) from {len(paths)} spec file(s)", markup=False)
    store = CacheStore(root)
    try:
        from ..cache.maintenance.gc import effective_limit

        limit, limit_source = effective_limit(store, o.max_size)
    except ValueError as exc:
        fail(str(exc))
    for name in ignored_compile_env():
        err.print(f"note: {name} is ignored: the compile workers drop settings outside the cache key", markup=False)
    if o.check_reproducible:
        from .release import check_reproducible_cmd

        raise typer.Exit(check_reproducible_cmd(variants, store, sample=o.sample, jobs=o.jobs, shard=shard_spec,
                                                out=out, err=err, as_json=as_json))
    if o.dry_run:
        _dry_run(variants, store, o, shard_spec, out)
        return
    from ..build.pipeline import BuildRequest, run_build

    view = _BuildView(o, out, err, store, limit_source, tally)
    # The committed tables, and those a custom spec directory carries beside it (DIR/specs, DIR/tuning).
    table_dirs = tuple(dict.fromkeys([tuning_dir(), *(Path(p).parent.parent / "tuning" for p in paths)]))
    request = BuildRequest(tuple(variants), store, jobs=o.jobs, verify=o.verify, shard=shard_spec,
                           explain=o.verbose or as_json, remote=o.remote or None, push=push, max_size=limit,
                           table_dirs=table_dirs)
    try:
        outcome = run_build(request, view)
    except KernelforgeError as exc:
        fail(str(exc))
    view.show(outcome)


def _pushes(url: str, mode: str | None, err: Console) -> bool:
    """Whether `build --remote` pushes after building; a note where a read-only remote makes it pull only."""
    from ..build.pipeline import remote_pushes

    try:
        pushes = remote_pushes(url, mode)
    except KernelforgeError as exc:  # a bad URL, a missing backend, read-write on a read-only remote
        fail(str(exc))
    if mode is None and not pushes:
        err.print(f"note: remote {url} is read-only (http/https): pull only, nothing is pushed (--remote-mode pull)",
                  markup=False)
    return pushes


class _BuildView:
    """How `kernelforge build` shows a build: while it runs (a build.pipeline.BuildProgress) the pull's
    report and the progress, and what came before the push as the push starts; then the outcome."""

    def __init__(self, o: BuildOptions, out: Console, err: Console, store: CacheStore, limit_source: str,
                 tally: _Tally) -> None:
        self.o, self.out, self.err, self.store, self.limit_source, self.tally = o, out, err, store, limit_source, tally
        self.reporter = _reporter(o, out)
        self.started = self.shown_local = False

    def say(self, line: str) -> None:
        if not self.o.quiet:
            self.out.print(line, markup=False)

    def pulled(self, report: TransferReport) -> None:
        from .transfer import show

        try:
            show(report, self.out)
        except typer.Exit:
            self.out.print("the refused entries will be built locally", markup=False)

    def start(self, todo: int) -> None:
        self.tally.total = todo
        if todo:
            self.started = True
            self.reporter.start(todo)

    def begin(self, name: str) -> None:
        self.reporter.begin(name)

    def result(self, r: VariantResult) -> None:
        if r.status == "up to date":
            return
        self.tally.built += r.status == "built"
        self.reporter.done(r.name, r.status == "failed")
        if r.status == "failed":
            self.reporter.note(f"FAILED {r.name} ({r.seconds:.2f}s)\n{r.error}")
        elif self.o.verbose and not self.o.quiet:
            self.reporter.note(f"built {r.name} in {r.seconds:.2f}s")
            if r.reason:
                self.reporter.note(f"  why: {r.reason}")

    def stop(self) -> None:
        if self.started:
            self.reporter.stop()

    def pushing(self, outcome: BuildOutcome) -> None:
        self._local(outcome)

    def show(self, outcome: BuildOutcome) -> None:
        """The outcome; exit 1 (a variant failed, a refusal, an invalid tuning table) or 2 (a stage could not run)."""
        from ..build.pipeline import INVALID, REJECTED

        if outcome.build is not None:
            self._local(outcome)
        if outcome.error is not None:
            fail(outcome.error.message, EXIT_FAILED if outcome.error.kind in (REJECTED, INVALID) else EXIT_USAGE)
        if outcome.pushed is not None:
            from .transfer import show

            show(outcome.pushed, self.out)
        if outcome.failed:
            for r in outcome.failed:
                self.err.print(f"failed: {r.name}", markup=False)
            raise typer.Exit(1)

    def _local(self, outcome: BuildOutcome) -> None:
        """The compile, the tuning tables, gc and the JSON report (once)."""
        if self.shown_local:
            return
        self.shown_local = True
        report, say = outcome.build, self.say
        for name, reason in report.replaced:
            say(f"replaced damaged entry {name} ({reason}); the damaged copy is in {self.store.layout.quarantine}")
        if report.stale_removed:
            say(f"removed {report.stale_removed} staging dir(s) left by dead builds")
        times = sorted(r.seconds for r in report.results if r.status == "built")
        if times:
            say(f"compile time per variant: min {times[0]:.2f}s, median {times[len(times) // 2]:.2f}s, "
                f"max {times[-1]:.2f}s")
        summary = (f"built {report.count('built')}, up to date {report.count('up to date')}, "
                   f"failed {report.count('failed')} in {report.seconds:.1f}s")
        as_json = self.o.format == "json"
        if self.o.quiet and not as_json:
            self.out.print(summary, markup=False)
        else:
            say(summary)
        for table in outcome.tables:
            say(f"tuning table {table.file}: {table.outcome}")
        if outcome.error is not None:  # a tuning table: no gc, no report
            return
        gc_report = outcome.gc
        if gc_report is not None:
            from .cache import human_bytes

            limit = human_bytes(gc_report.max_size)
            if gc_report.removed:
                say(f"size limit {limit} (from {self.limit_source}): evicted {len(gc_report.removed)} least "
                    f"recently used entr(ies), {human_bytes(gc_report.bytes_before)} -> "
                    f"{human_bytes(gc_report.bytes_after)}")
            if gc_report.over_limit:
                self.err.print(f"warning: the cache ({human_bytes(gc_report.bytes_after)}) stays over its size "
                               f"limit {limit}: this build's selection alone is larger", markup=False)
        if as_json:
            from .json_schemas import emit

            emit("build", {**report.to_dict(), "dry_run": False, "tuning_tables": [t.to_dict() for t in outcome.tables],
                           "gc": gc_report.to_dict() if gc_report is not None else None})


def _dry_run(variants, store: CacheStore, o: BuildOptions, shard_spec, out: Console) -> None:
    """List what a build would compile and why; write nothing."""
    from ..build.driver import build_variants

    try:
        report = build_variants(variants, store, verify=o.verify, shard=shard_spec, dry_run=True)
    except KernelforgeError as exc:
        fail(str(exc))
    todo = [r for r in report.results if r.status == "would build"]
    if o.format == "json":
        from .json_schemas import emit

        emit("build", {**report.to_dict(), "dry_run": True, "tuning_tables": [], "gc": None})
        return
    for r in report.results:
        if r.status == "would build":
            out.print(f"would build {r.name}: {r.reason}", markup=False)
        elif o.verbose:
            out.print(f"up to date {r.name}", markup=False)
    out.print(f"dry run: would build {len(todo)}, up to date {report.count('up to date')}", markup=False)
