"""Build progress that works on a terminal and in a log.

On a terminal: a rich progress bar with the ETA, the variant being compiled and the failures
so far. Elsewhere (CI logs, pipes): one plain line every `interval` seconds and at every 10% of
the work (done/total, rate, ETA, failures, what compiles now), never wrapped, flushed at once, so
a log shows a long build moving at least once per interval.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

DEFAULT_INTERVAL_S = 30.0


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m{rest % 60:02d}s" if h else f"{rest // 60}m{rest % 60:02d}s"


class Reporter:
    """No output (--quiet, or nothing to build)."""

    def start(self, total: int) -> None: ...
    def begin(self, name: str) -> None: ...
    def done(self, name: str, failed: bool) -> None: ...
    def note(self, line: str) -> None: ...
    def stop(self) -> None: ...


class BarReporter(Reporter):
    """A rich progress bar (terminals)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.failed = 0
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[failed]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), TextColumn("{task.fields[current]}"),
                                 console=console, transient=False)
        self.task = None
        self.running: list[str] = []

    def start(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("compiling", total=total, failed="", current="")

    def _current(self) -> str:
        return self.running[-1] if self.running else ""

    def begin(self, name: str) -> None:
        self.running.append(name)
        self.progress.update(self.task, current=self._current())

    def done(self, name: str, failed: bool) -> None:
        if name in self.running:
            self.running.remove(name)
        self.failed += failed
        self.progress.update(self.task, advance=1, current=self._current(),
                             failed=f"[red]{self.failed} failed[/red]" if self.failed else "")

    def note(self, line: str) -> None:
        self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self.progress.update(self.task, current="")
        self.progress.stop()


class LineReporter(Reporter):
    """Plain progress lines for logs: every `interval` seconds (from a timer thread, so a long
    compile still shows the build alive) and at every 10% step."""

    def __init__(self, stream: IO[str] | None = None, interval: float = DEFAULT_INTERVAL_S) -> None:
        self.stream = stream or sys.stdout
        self.interval = max(0.05, interval)
        self.total = self.done_n = self.failed = 0
        self.running: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._step = 0
        self._thread: threading.Thread | None = None

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        rate = self.done_n / elapsed if elapsed > 0 else 0.0
        eta = _clock((self.total - self.done_n) / rate) if rate > 0 else "unknown"
        pct = 100 * self.done_n // self.total if self.total else 100
        more = f" (+{len(self.running) - 1} more)" if len(self.running) > 1 else ""
        now = f", compiling {self.running[-1]}{more}" if self.running else ""
        return (f"progress: {self.done_n}/{self.total} variants ({pct}%), {rate * 60:.1f}/min, elapsed "
                f"{_clock(elapsed)}, ETA {eta}, {self.failed} failed{now}")

    def start(self, total: int) -> None:
        self.total, self._t0 = total, time.monotonic()
        self._write(f"compiling {total} variant(s); a progress line every {self.interval:g}s and every 10%")
        self._thread = threading.Thread(target=self._tick, daemon=True, name="kernelforge-progress")
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._write(self.line())

    def begin(self, name: str) -> None:
        with self._lock:
            self.running.append(name)

    def done(self, name: str, failed: bool) -> None:
        with self._lock:
            if name in self.running:
                self.running.remove(name)
            self.done_n += 1
            self.failed += failed
            step = 10 * self.done_n // self.total if self.total else 10
            if step > self._step:
                self._step = step
                self._write(self.line())

    def note(self, line: str) -> None:
        with self._lock:
            self._write(line)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
