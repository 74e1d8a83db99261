"""Compile worker processes that die with their builder, and a pool that outlives a worker's death.

`concurrent.futures.ProcessPoolExecutor` does not fit a long build: one worker killed (e.g. by
the OOM killer) breaks the whole pool and fails every pending task, an interrupt drains the
queue instead of cancelling it, and a SIGKILLed builder leaves its workers blocked forever. This
pool hands one task at a time to each worker over its own pipe, so it always knows which task a
dead worker was running: that task is reported lost, a fresh worker replaces the dead one, and
the others carry on. Leaving the `with` block by an exception (Ctrl-C included) terminates every
worker at once.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator, Sequence

_HELD = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1
TERMINATE_GRACE_S = 2.0
_NOTHING = object()


class Terminated(BaseException):
    """SIGTERM as an exception (what KeyboardInterrupt is to SIGINT); see `sigterm_raises`."""


@dataclass(frozen=True)
class WorkerLost:
    """The outcome of a task whose worker died while running it."""

    reason: str


@dataclass(frozen=True)
class WorkerError:
    """The outcome of a task whose function raised (the formatted exception)."""

    message: str


@contextmanager
def signals_held() -> Iterator[None]:
    """Keep SIGINT and SIGTERM pending in this thread while the block runs; they arrive at its end."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` in the main thread (no-op in other threads)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _set_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when `parent_pid`, its parent, ends (even by SIGKILL).

    Linux: PR_SET_PDEATHSIG. It fires when the parent *thread* that started this process exits;
    the pool starts workers from the thread that runs it, which outlives them. Elsewhere: a
    thread polling the parent pid.
    """
    if not _set_pdeathsig():
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watch").start()
    elif os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _worker_main(conn: Connection, parent_pid: int, fn: Callable[..., Any],
                 initializer: Callable[[], None] | None) -> None:
    die_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group: the builder decides and terminates its workers.
    # SIGINT was blocked since before this process existed (see WorkerPool._spawn), so a Ctrl-C
    # during start-up stays pending until here and is then discarded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    if initializer is not None:
        initializer()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            result: Any = fn(*task)
        except Exception as exc:
            result = WorkerError("".join(traceback.format_exception_only(type(exc), exc)).strip())
        conn.send(result)


def describe_exit(exitcode: int | None) -> str:
    """A process exit code in words: "killed by SIGKILL", "exited with status 1"."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


@dataclass
class _Worker:
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection
    task: int | None = None


class WorkerPool:
    """Up to `jobs` spawned processes, each running `fn(*task)` for one task at a time.

    Use as a context manager and iterate `run(tasks)`; it yields (task index, outcome) where
    outcome is fn's return value, a `WorkerError` or a `WorkerLost`. A dead worker is replaced
    while tasks remain; the number of workers ever started is bounded by jobs + len(tasks), so
    workers that keep dying cannot loop.
    """

    def __init__(self, fn: Callable[..., Any], jobs: int, initializer: Callable[[], None] | None = None) -> None:
        self._fn = fn
        self._jobs = max(1, jobs)
        self._initializer = initializer
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self.started = 0

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._stop_gracefully()
        else:
            self.terminate()

    @property
    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.process.pid for w in self._workers]

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, name=f"kernelforge-worker-{self.started}",
                                    args=(child_conn, os.getpid(), self._fn, self._initializer))
        with signals_held():  # the child inherits the blocked mask: see _worker_main
            process.start()
        child_conn.close()
        self.started += 1
        worker = _Worker(process, parent_conn)
        self._workers.append(worker)
        return worker

    def run(self, tasks: Sequence[tuple[Any, ...]],
            on_send: Callable[[int], None] | None = None) -> Iterator[tuple[int, Any]]:
        """Run every task; yield (index, outcome) as each finishes (see the class docstring).
        `on_send(index)` is called as a task is handed to a worker (e.g. to show what compiles)."""
        self._on_send = on_send
        queue = deque(range(len(tasks)))
        max_started = self.started + self._jobs + len(tasks)
        while queue or any(w.task is not None for w in self._workers):
            self._dispatch(queue, tasks, max_started)
            busy = [w for w in self._workers if w.task is not None]
            if not busy:  # no worker could be started: report the rest rather than spin
                while queue:
                    yield queue.popleft(), WorkerLost(f"no worker left: {self.started} worker processes died")
                return
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for w in busy:
                if w.conn in ready or w.process.sentinel in ready:
                    yield from self._collect(w)

    def _dispatch(self, queue: deque[int], tasks: Sequence[tuple[Any, ...]], max_started: int) -> None:
        for w in [w for w in self._workers if w.task is None]:
            if queue:
                self._send(w, queue, tasks)
        while queue and len(self._workers) < self._jobs and self.started < max_started:
            self._send(self._spawn(), queue, tasks)

    def _send(self, w: _Worker, queue: deque[int], tasks: Sequence[tuple[Any, ...]]) -> None:
        index = queue.popleft()
        try:
            w.conn.send(tasks[index])
        except OSError:  # it died while idle: nothing was lost, a new worker takes the task
            queue.appendleft(index)
            self._reap(w)
            return
        w.task = index
        if getattr(self, "_on_send", None) is not None:
            self._on_send(index)  # type: ignore[misc]

    def _collect(self, w: _Worker) -> Iterator[tuple[int, Any]]:
        index = w.task
        try:
            outcome = w.conn.recv() if w.conn.poll() else _NOTHING
        except Exception:  # EOF, or a message cut short: the worker is dead or no longer usable
            outcome = _NOTHING
        if outcome is not _NOTHING:
            w.task = None
            yield index, outcome
            return
        reason = self._reap(w)
        if index is not None:
            yield index, WorkerLost(reason)

    def _reap(self, w: _Worker) -> str:
        """Forget a worker that died (killing it if it did not): how it ended, in words."""
        w.process.join(TERMINATE_GRACE_S)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
        self._workers.remove(w)
        return describe_exit(w.process.exitcode)

    def _stop_gracefully(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in list(self._workers):
            w.process.join(TERMINATE_GRACE_S)
        self.terminate()  # any that did not stop in time

    def terminate(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL after a grace period) and reap it."""
        with signals_held():  # a second Ctrl-C must not leave workers behind
            for w in self._workers:
                if w.process.is_alive():
                    w.process.terminate()
            deadline = time.monotonic() + TERMINATE_GRACE_S
            for w in self._workers:
                w.process.join(max(0.0, deadline - time.monotonic()))
                if w.process.is_alive():
                    w.process.kill()
                    w.process.join()
            for w in list(self._workers):
                self._reap(w)
