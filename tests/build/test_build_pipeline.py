"""The build use case called as a library (build.pipeline.run_build, no CLI): the outcome says what
each stage (pull, compile, tuning tables, gc, push) did, the progress calls come in order, and a
stage that cannot run ends it. `kernelforge build` renders this outcome (tests/build/test_build.py,
test_remote_build.py check the command)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelforge.build.pipeline import INVALID, UNUSABLE, BuildRequest, remote_pushes, run_build
from kernelforge.cache import CacheStore
from kernelforge.config import tuning_dir
from kernelforge.errors import CacheError
from tests.build._kf_build_helpers import ARCH, NAMES, SELECTION, toolchain_problem


def _selection() -> tuple:
    """The two NAMES variants of the default catalog (what `kernelforge build --only SELECTION` selects)."""
    from kernelforge.spec import load_specs, select
    from kernelforge.spec.files import resolve_spec_paths

    return tuple(select(load_specs(resolve_spec_paths()), only=[SELECTION], archs=[ARCH]))


class _Recorder:
    """A BuildProgress that records its calls."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def pulled(self, report) -> None:
        self.events.append(("pulled", report.ok))

    def start(self, todo: int) -> None:
        self.events.append(("start", todo))

    def begin(self, name: str) -> None:
        self.events.append(("begin", name))

    def result(self, result) -> None:
        self.events.append(("result", result.name, result.status))

    def stop(self) -> None:
        self.events.append(("stop",))

    def pushing(self, outcome) -> None:
        self.events.append(("pushing", outcome.build is not None and outcome.pushed is None))


@pytest.mark.slow
def test_run_build_reports_every_stage(built_cache, tmp_path: Path) -> None:
    assert built_cache.exit_code == 0, built_cache.output
    root = tmp_path / "cache"
    shutil.copytree(built_cache.root, root, symlinks=True)
    url = (tmp_path / "remote").as_uri()
    progress = _Recorder()
    outcome = run_build(BuildRequest(_selection(), CacheStore(root), jobs=1, remote=url, max_size=1), progress)

    assert outcome.status == "ok" and outcome.error is None and outcome.failed == []
    assert outcome.pulled is not None and outcome.pulled.ok and outcome.pulled.transferred == []  # an empty remote
    report = outcome.build
    assert report is not None and sorted(r.name for r in report.results) == sorted(NAMES)
    assert report.count("up to date") == 2 and not report.runtime_built
    assert [t.file for t in outcome.tables] == [p.name for p in sorted(tuning_dir().glob("*.json"))]
    assert all(t.outcome.startswith("tuning.") and t.outcome.endswith("(up to date)") for t in outcome.tables)
    # A 1-byte limit: gc cannot get there without evicting the selection, which it never does.
    gc = outcome.gc
    assert gc is not None and gc.max_size == 1 and gc.over_limit and gc.removed == []
    # The push sends the selection and its runtime library to the empty remote.
    assert outcome.pushed is not None and outcome.pushed.ok and len(outcome.pushed.transferred) == 3
    assert set(NAMES) <= set(outcome.pushed.transferred)
    assert progress.events[:2] == [("pulled", True), ("start", 0)]
    assert sorted(progress.events[2:4]) == sorted(("result", n, "up to date") for n in NAMES)
    assert progress.events[4:] == [("stop",), ("pushing", True)]


@pytest.mark.slow
def test_run_build_stops_at_an_invalid_tuning_table(built_cache, tmp_path: Path, monkeypatch) -> None:
    from kernelforge.build import pipeline

    assert built_cache.exit_code == 0, built_cache.output
    root = tmp_path / "cache"
    shutil.copytree(built_cache.root, root, symlinks=True)
    tables = tmp_path / "tuning"
    tables.mkdir()
    shutil.copy(sorted(tuning_dir().glob("*.json"))[0], tables / "a.json")
    (tables / "b.json").write_text("[]")
    monkeypatch.setattr(pipeline, "tuning_dir", lambda: tables)
    url = (tmp_path / "remote").as_uri()
    outcome = run_build(BuildRequest(_selection(), CacheStore(root), remote=url, max_size=1))
    assert outcome.status == "stopped" and outcome.error is not None
    assert (outcome.error.stage, outcome.error.kind) == ("tuning tables", INVALID)
    assert outcome.error.message.startswith(f"{tables / 'b.json'}: not a kernelforge tuning table")
    assert outcome.build is not None and outcome.build.count("up to date") == 2  # compiled before the tables
    assert [t.file for t in outcome.tables] == ["a.json"]  # imported before b.json stopped it
    assert outcome.gc is None and outcome.pushed is None and not (tmp_path / "remote").exists()  # neither ran


@pytest.mark.skipif(toolchain_problem() is not None, reason=str(toolchain_problem()))
def test_run_build_stops_at_a_remote_it_cannot_pull(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    progress = _Recorder()
    outcome = run_build(BuildRequest(_selection(), CacheStore(root), remote="nosuchproto://x/y"), progress)
    assert outcome.status == "stopped" and outcome.error is not None
    assert (outcome.error.stage, outcome.error.kind) == ("pull", UNUSABLE)
    assert "nosuchproto://x/y" in outcome.error.message
    assert outcome.build is None and outcome.tables == () and outcome.gc is None and outcome.pushed is None
    assert progress.events == []  # nothing compiled
    assert not (root / "v1" / "index.json").exists()


def test_remote_pushes_follows_the_mode(tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    assert remote_pushes(url) and remote_pushes(url, "read-write")
    assert not remote_pushes(url, "pull")
    assert not remote_pushes("nosuchproto://x", "pull")  # pull-only never opens the remote here
    with pytest.raises(CacheError, match="not a usable fsspec URL"):
        remote_pushes("nosuchproto://x")


def test_remote_pushes_never_to_a_read_only_remote(http_root) -> None:
    pytest.importorskip("aiohttp", reason="fsspec's http backend needs aiohttp (pip install 'fsspec[http]')")
    _, url = http_root
    assert not remote_pushes(url)
    with pytest.raises(CacheError, match="is read-only"):
        remote_pushes(url, "read-write")
