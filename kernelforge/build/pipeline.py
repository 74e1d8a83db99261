"""The build use case behind `kernelforge build`: pull, compile, import the tuning tables, gc, push.

`run_build(request, progress)` runs the stages in this order and returns a `BuildOutcome` saying
what each did; it prints nothing (the CLI renders the outcome and draws its progress bar from the
`BuildProgress` calls).

1. pull (with a remote): the entries of the selection's keys the cache lacks; an entry the
   remote holds but that is refused (bad signature, ...) is then compiled here.
2. compile: `driver.build_variants` (an up-to-date variant costs an index look-up).
3. tuning tables: every committed table (config.tuning_dir()), and those of a `tuning/` beside a
   spec file's directory, imported into the cache.
4. gc (with a size limit, on a writable cache): least recently used entries are evicted until
   the cache fits, never one of the selection's.
5. push (with a remote the build may write): the selection's entries the remote lacks.

A stage that cannot run as a whole (the remote cannot be read or written or fails verification,
a committed tuning table is invalid or cannot be imported) ends the use case: the outcome's
`error` names the stage, and the later stages do not run. A variant that fails to compile stops
nothing. Errors of the compile stage itself (an unwritable cache, ...) and interrupts (Ctrl-C,
`pool.Terminated`) propagate; what was published stays.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from ..build.tables import import_table
from ..cache import CacheStore
from ..cache.maintenance.gc import GcReport, gc
from ..cache.transfer.common import Rejected, TransferReport
from ..cache.transfer.remote import Remote, pull, push
from ..config import tuning_dir
from ..errors import CacheError, KernelforgeError
from . import driver
from .driver import BuildReport, VariantResult
from .selection import selection_keys

# StageError.kind
REJECTED = "rejected"  # the remote's entries failed verification (cache.transfer.Rejected)
INVALID = "invalid"  # a committed tuning table is not a valid table
UNUSABLE = "unusable"  # the stage could not run: a bad or unreachable remote, an unwritable cache, ...


@dataclass(frozen=True)
class BuildRequest:
    """What to build, where, and the stages around the compile."""

    variants: Sequence[Any]  # the selected variants (spec.select)
    store: CacheStore
    jobs: int | None = None  # compile workers (None: one per CPU)
    verify: bool = False  # re-hash the cached entries of the selection (and the tables), rebuild damaged ones
    shard: tuple[int, int] | None = None  # build only shard I of N (1-based) of the selection
    explain: bool = False  # find why each variant is rebuilt (VariantResult.reason)
    remote: str | None = None  # fsspec URL: pull the selection's missing entries first
    push: bool = True  # with `remote`: push what the remote lacks afterwards (see `remote_pushes`)
    max_size: int | None = None  # evict least recently used entries down to this many bytes (None: no gc)
    # Directories of tuning tables to import (None: the package's committed ones, config.tuning_dir()).
    table_dirs: Sequence[Path] | None = None


@dataclass(frozen=True)
class TableImport:
    """One committed tuning table imported (or found up to date) in the cache."""

    file: str  # the table file's name
    outcome: str  # build.tables.import_table's line, e.g. "tuning.<device>.<arch> (imported)"

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "outcome": self.outcome}


@dataclass(frozen=True)
class StageError:
    """Why a stage ended the use case."""

    stage: str  # "pull", "tuning tables" or "push"
    kind: str  # REJECTED, INVALID or UNUSABLE
    message: str  # one line naming what was wrong


@dataclass(frozen=True)
class BuildOutcome:
    """What `run_build` did, stage by stage; a stage that did not run is None (or empty)."""

    pulled: TransferReport | None = None
    build: BuildReport | None = None  # None: the pull ended the use case
    tables: tuple[TableImport, ...] = ()
    gc: GcReport | None = None  # None: no size limit, or the cache is not writable
    pushed: TransferReport | None = None
    error: StageError | None = None

    @property
    def failed(self) -> list[VariantResult]:
        """The variants that failed to compile."""
        return self.build.failed if self.build is not None else []

    @property
    def status(self) -> str:
        """How the build ended, the first that applies: "stopped" (a stage error, see `error`),
        "push refused" (the push refused entries), "failed" (a variant failed), "ok"."""
        if self.error is not None:
            return "stopped"
        if self.pushed is not None and not self.pushed.ok:
            return "push refused"
        return "failed" if self.failed else "ok"


class BuildProgress(Protocol):
    """What `run_build` tells as it goes."""

    def pulled(self, report: TransferReport) -> None:
        """The pull is done (before compiling)."""

    def start(self, todo: int) -> None:
        """Compiling starts: `todo` variants to compile (0: the selection is up to date)."""

    def begin(self, name: str) -> None:
        """A variant is handed to a compile worker."""

    def result(self, result: VariantResult) -> None:
        """One variant's outcome (the up-to-date ones right after `start`)."""

    def stop(self) -> None:
        """Compiling is over, or was cut short by an error or an interrupt (once, after `start`)."""

    def pushing(self, outcome: BuildOutcome) -> None:
        """The push starts; `outcome` holds the stages before it."""


class _Silent:
    def pulled(self, report: TransferReport) -> None:
        pass

    def start(self, todo: int) -> None:
        pass

    def begin(self, name: str) -> None:
        pass

    def result(self, result: VariantResult) -> None:
        pass

    def stop(self) -> None:
        pass

    def pushing(self, outcome: BuildOutcome) -> None:
        pass


def remote_pushes(url: str, mode: str | None = None) -> bool:
    """Whether a build with `remote=url` pushes afterwards (BuildRequest.push), for `--remote-mode`
    `mode`: "pull" never pushes; "read-write" always (CacheError on a read-only http(s) remote);
    None: push unless the remote is read-only. CacheError: a bad URL or a missing fsspec backend."""
    if mode == "pull":
        return False
    if not Remote(url).read_only:
        return True
    if mode == "read-write":
        raise CacheError(f"remote {url} is read-only (http/https can only be pulled from): --remote-mode "
                         "read-write cannot push to it; use --remote-mode pull, or a file://, s3:// or gs:// URL")
    return False


def _stage_error(stage: str, exc: Exception) -> StageError:
    kind = REJECTED if isinstance(exc, Rejected) else UNUSABLE if isinstance(exc, KernelforgeError) else INVALID
    return StageError(stage, kind, str(exc))


def run_build(request: BuildRequest, progress: BuildProgress | None = None) -> BuildOutcome:
    """Pull, compile, import the tuning tables, gc and push (see the module docstring).

    Raises what `build_variants` raises (KernelforgeError: the cache cannot be built into) and
    interrupts; every other failure is in the outcome."""
    tell = progress if progress is not None else _Silent()
    store = request.store
    remote = request.remote
    keys = selection_keys(request.variants) if remote else set()
    pulled = None
    if remote:
        try:
            pulled = pull(store, remote, keys=keys, missing_ok=True)
        except CacheError as exc:
            return BuildOutcome(error=_stage_error("pull", exc))
        tell.pulled(pulled)
    report = _compile(request, tell)
    tables = []
    directories = request.table_dirs if request.table_dirs is not None else (tuning_dir(),)
    for path in [f for d in directories if d.is_dir() for f in sorted(d.glob("*.json"))]:
        try:
            tables.append(TableImport(path.name, import_table(store, path, verify=request.verify)))
        except (KernelforgeError, ValueError) as exc:
            return BuildOutcome(pulled, report, tuple(tables), error=_stage_error("tuning tables", exc))
    gc_report = None
    if request.max_size is not None and store.writable_problem() is None:
        gc_report = gc(store, max_size=request.max_size, protect={r.key for r in report.results if r.key})
    pushed = None
    if remote and request.push:
        tell.pushing(BuildOutcome(pulled, report, tuple(tables), gc_report))
        try:
            pushed = push(store, remote, keys=keys)
        except CacheError as exc:
            return BuildOutcome(pulled, report, tuple(tables), gc_report, error=_stage_error("push", exc))
    return BuildOutcome(pulled, report, tuple(tables), gc_report, pushed)


def _compile(request: BuildRequest, tell: BuildProgress) -> BuildReport:
    started = False

    def on_start(todo: int) -> None:
        nonlocal started
        started = True
        tell.start(todo)

    try:
        # driver.build_variants looked up at call time: tests replace it with a compiler-free fake
        return driver.build_variants(request.variants, request.store, jobs=request.jobs, on_result=tell.result,
                                     on_start=on_start, on_begin=tell.begin, verify=request.verify,
                                     shard=request.shard, explain=request.explain)
    finally:
        if started:
            tell.stop()
