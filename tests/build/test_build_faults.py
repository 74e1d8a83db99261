"""Process faults of `kernelforge build`, with the real worker pool and a real CLI subprocess:
Ctrl-C, SIGKILL of the builder, SIGKILL of one worker, stale staging dirs, and the pool alone."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore, load_index_for_runtime, verify
from tests.build._kf_build_helpers import ARCH, cli_env, kf_cmd

# Large enough that a -j 2 build is still compiling when signalled (~0.2 s per warm compile).
FAULT_SELECTION = "quantize.mxfp8.*.t128u1"
FAULT_COUNT = 24
SUMMARY = re.compile(r"built (\d+), up to date (\d+), failed (\d+) in [\d.]+s")
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _summary(text: str) -> tuple[int, int, int]:
    m = SUMMARY.search(text)
    assert m, f"no summary line in:\n{text}"
    return int(m[1]), int(m[2]), int(m[3])


def _build_argv(root: Path) -> list[str]:
    return kf_cmd("build", "--cache", str(root), "--arch", ARCH, "--only", FAULT_SELECTION, "-j", "2")


class Build:
    """A `kernelforge build` subprocess in its own session (so its process group can be signalled)."""

    def __init__(self, root: Path, logs: Path) -> None:
        self.root = root
        self.out, self.err = logs.with_suffix(".out"), logs.with_suffix(".err")
        # Files, not pipes: workers outliving a killed builder must not block the test on a pipe.
        # SIGINT back to its default in the child: a test run started as a background job of a
        # non-interactive shell (`make test &`, some CI runners) has SIGINT ignored, which an exec
        # keeps, and the build would then never see the Ctrl-C this file sends.
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(_build_argv(root), stdout=out, stderr=err, env=cli_env(),
                                         start_new_session=True,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    @property
    def output(self) -> tuple[str, str]:
        return self.out.read_text(), self.err.read_text()

    def worker_stage(self, timeout: float = 60.0) -> tuple[Path, int]:
        """The first staging dir a worker (not the builder itself) creates, and that worker's pid."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for d in _stage_dirs(self.root):
                pid = int(d.name.split("-")[2])
                if pid != self.proc.pid:
                    return d, pid
            assert self.proc.poll() is None, f"the build ended before compiling: {self.output}"
            time.sleep(0.02)
        raise AssertionError(f"no worker staging dir after {timeout}s: {self.output}")


def _stage_dirs(root: Path) -> list[Path]:
    tmp = CacheStore(root).layout.tmp
    return sorted(d for d in tmp.iterdir() if d.name.startswith("stage-")) if tmp.is_dir() else []


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (workers and multiprocessing's resource tracker)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = st[1]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _wait_gone(pids: set[int], timeout: float, *, reaped: bool = False) -> set[int]:
    """The pids still running (or, with `reaped`, not yet reaped) after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    still = (lambda p: _stat(p) is not None) if reaped else _alive
    while (left := {p for p in pids if still(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _kernel_names(root: Path) -> set[str]:
    return {e["name"] for e in load_index_for_runtime(root).values() if e["kind"] == "kernel"}


def _rerun_completes(root: Path, already: int) -> str:
    """Build the selection again: it must finish, compiling only what is missing."""
    proc = subprocess.run(_build_argv(root), capture_output=True, text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(proc.stdout) == (FAULT_COUNT - already, already, 0), proc.stdout
    assert len(_kernel_names(root)) == FAULT_COUNT
    assert _stage_dirs(root) == []
    assert verify(CacheStore(root)).ok
    return proc.stdout


@pytest.mark.slow
@needs_proc
def test_ctrl_c_stops_the_build_and_a_rerun_resumes(tmp_path):
    root = tmp_path / "cache"
    build = Build(root, tmp_path / "first")
    build.worker_stage()
    workers = _descendants(build.proc.pid)
    assert workers
    t0 = time.monotonic()
    os.killpg(build.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    rc = build.proc.wait(timeout=15)
    stopped_in = time.monotonic() - t0
    out, err = build.output
    assert rc == 130, out + err
    assert stopped_in < 15
    assert "Traceback" not in out + err
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(rf"interrupted: built \d+ of {FAULT_COUNT}; run the same command to resume", last), err
    assert _wait_gone(workers, 5) == set()
    assert _stage_dirs(root) == []
    already = len(_kernel_names(root))
    assert already < FAULT_COUNT, "the build finished before the signal: enlarge FAULT_SELECTION"
    _rerun_completes(root, already)


@pytest.mark.slow
@needs_proc
def test_sigterm_to_the_builder_alone_terminates_its_workers(tmp_path):
    root = tmp_path / "cache"
    build = Build(root, tmp_path / "first")
    build.worker_stage()
    workers = _descendants(build.proc.pid)
    os.kill(build.proc.pid, signal.SIGTERM)
    assert build.proc.wait(timeout=15) == 143, build.output
    out, err = build.output
    assert "Traceback" not in out + err
    assert err.strip().splitlines()[-1].startswith("terminated: built "), err
    assert _wait_gone(workers, 5) == set()
    assert _stage_dirs(root) == []


@pytest.mark.slow
@needs_proc
def test_workers_die_with_a_killed_builder_and_the_next_build_cleans_up(tmp_path):
    root = tmp_path / "cache"
    build = Build(root, tmp_path / "first")
    build.worker_stage()  # a worker is compiling now (its first compile takes ~2 s)
    workers = _descendants(build.proc.pid)
    assert workers
    os.kill(build.proc.pid, signal.SIGKILL)
    build.proc.wait(timeout=5)
    assert _wait_gone(workers, 5) == set(), "workers outlived their killed builder"
    # Orphans are reaped by init, here up to ~2 s later; until then a zombie's pid counts as alive.
    assert _wait_gone(workers, 20, reaped=True) == set()
    left = _stage_dirs(root)
    assert left, "a worker killed mid-compile leaves its staging dir for the next build"
    already = len(_kernel_names(root))
    out = _rerun_completes(root, already)
    m = re.search(r"removed (\d+) staging dir\(s\) left by dead builds", out)
    assert m and int(m[1]) >= len(left), out
    assert not any(d.exists() for d in left)


@pytest.mark.slow
@needs_proc
def test_a_killed_worker_fails_only_its_variant(tmp_path):
    root = tmp_path / "cache"
    build = Build(root, tmp_path / "first")
    _, worker = build.worker_stage()
    os.kill(worker, signal.SIGKILL)
    rc = build.proc.wait(timeout=120)
    out, err = build.output
    assert rc == 1, out + err
    assert _summary(out) == (FAULT_COUNT - 1, 0, 1), out  # a fresh worker built all the others
    failed = re.findall(r"^failed: (\S+)$", err, re.M)
    assert len(failed) == 1, err
    assert f"FAILED {failed[0]}" in out
    assert "worker process died while building this variant (killed by SIGKILL)" in out
    assert "Traceback" not in out + err
    assert failed[0] not in _kernel_names(root)
    assert _stage_dirs(root) == []
    assert verify(CacheStore(root)).ok
    _rerun_completes(root, FAULT_COUNT - 1)


# ---------------------------------------------------------------- fast: no compiler


def _reaped_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_remove_stale_staging(tmp_path):
    from kernelforge.build.driver import remove_stale_staging

    store = CacheStore(tmp_path / "cache")
    assert remove_stale_staging(store) == 0
    assert not store.root.exists()  # nothing to do: nothing written
    mine = store.staging_dir()
    dead = mine.with_name(mine.name.replace(f"-{os.getpid()}-", f"-{_reaped_pid()}-"))
    dead.mkdir()
    (dead / "module.o").write_bytes(b"half")
    assert remove_stale_staging(store) == 1
    assert sorted(store.layout.tmp.iterdir()) == [mine]


@needs_proc
def test_pool_replaces_a_dead_worker_and_reports_only_its_task():
    from kernelforge.build.pool import WorkerLost, WorkerPool
    from tests.build._kf_build_helpers import pool_task

    tasks = [("ok", i) for i in range(6)] + [("die", 6)] + [("ok", i) for i in range(7, 10)]
    with WorkerPool(pool_task, 2) as pool:
        outcomes = dict(pool.run(tasks))
    assert sorted(outcomes) == list(range(10))
    assert outcomes[6] == WorkerLost("killed by SIGKILL")
    assert all(outcomes[i] == i * i for i in range(10) if i != 6)
    # A replacement starts only if tasks were still queued when the death was seen.
    assert pool.started in (2, 3) and pool.pids == []


@needs_proc
def test_pool_stops_when_every_worker_keeps_dying():
    from kernelforge.build.pool import WorkerLost, WorkerPool
    from tests.build._kf_build_helpers import pool_task

    with WorkerPool(pool_task, 2) as pool:
        outcomes = dict(pool.run([("die", i) for i in range(4)]))
    assert outcomes == {i: WorkerLost("killed by SIGKILL") for i in range(4)}
    assert pool.started == 4  # one per lost task, never more than jobs + tasks


@needs_proc
def test_pool_workers_ignore_sigint_and_an_exception_terminates_them():
    """Ctrl-C reaches the workers too: they ignore it (the builder decides), and leaving the pool
    by an exception (KeyboardInterrupt in the builder) terminates them at once, mid-task."""
    from kernelforge.build.pool import WorkerPool
    from tests.build._kf_build_helpers import pool_task

    tasks = [("sigint", i) for i in range(3)] + [("sleep", 3), ("sleep", 4)]
    with pytest.raises(KeyboardInterrupt):
        with WorkerPool(pool_task, 2) as pool:
            for index, outcome in pool.run(tasks):
                assert outcome == index * index
                if index == 2:
                    pids = set(pool.pids)
                    t0 = time.monotonic()
                    raise KeyboardInterrupt
    assert time.monotonic() - t0 < 5 and pool.pids == []
    assert _wait_gone(pids, 1) == set()
