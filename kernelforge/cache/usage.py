"""Advisory usage records: when each entry was last used, and hit/miss/load counts per op.

The runtime never writes the index or an entry's meta.json. What it records goes to a
per-process, append-only log under `v1/usage/` (`<host>-<pid>-<random>.log`, one line per
event: `<unix time> <event> <op> <key>`), opened on the first event and written with one
`os.write` per event:

* `load`: a module was loaded (once per process per entry: the loader memoizes modules); this
  is the last-use record that `cache gc` orders entries by (LRU);
* `hit`: a new (op, shape bucket) was resolved to a cached entry; `miss`: KernelNotBuilt.

Recording is best effort and never raises: a cache this process cannot write (a read-only
cache, an installed kernel wheel, another user's cache), a symlinked `usage/`, or any OS error
switches it off for the process. `KERNELFORGE_RECORD_USAGE=0` switches it off too.

`fold` (run by `cache gc`, under `locks/usage.lock`) merges the logs into `usage/summary.json`
(last use per key, counts per op, and how far each live log was read) and deletes the logs of
dead processes; `read_usage` gives the same view without writing (for `cache stats`).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USAGE_DIR = "usage"
SUMMARY = "summary.json"
RECORD_ENV = "KERNELFORGE_RECORD_USAGE"
EVENTS = ("hit", "miss", "load")
_HOST = "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


class UsageLog:
    """The append-only usage log of this process in one cache root (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], enabled: bool = True) -> None:
        self.root = Path(root)
        self._fd: int | None = None
        self._off = not enabled or os.environ.get(RECORD_ENV, "1") == "0"
        self._loaded: set[str] = set()
        self._lock = threading.Lock()

    def _open(self) -> int | None:
        schema_root = self.root / "v1"
        if not os.access(schema_root, os.W_OK | os.X_OK):  # read-only cache: record nothing
            return None
        directory = schema_root / USAGE_DIR
        try:
            os.mkdir(directory, 0o777)
        except FileExistsError:
            pass
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            name = f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.log"
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                           0o666, dir_fd=dfd)
        finally:
            os.close(dfd)

    def record(self, event: str, op: str, key: str = "") -> None:
        """Append one event; never raises (a failure switches recording off for this process)."""
        if self._off:
            return
        try:
            with self._lock:
                if event == "load":
                    if key in self._loaded:
                        return
                    self._loaded.add(key)
                if self._fd is None:
                    self._fd = self._open()
                    if self._fd is None:
                        self._off = True
                        return
                os.write(self._fd, f"{int(time.time())} {event} {op or '-'} {key or '-'}\n".encode())
        except Exception:  # advisory: never let bookkeeping break a kernel call
            self._off = True


@dataclass
class Usage:
    """What the usage records say: last use per key (unix time), counts per op and event."""

    last_use: dict[str, int] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # log file -> bytes already folded
    folded_at: int = 0

    def add_line(self, line: str) -> None:
        parts = line.split()
        if len(parts) != 4 or parts[1] not in EVENTS:
            return
        try:
            ts = int(parts[0])
        except ValueError:
            return
        _, event, op, key = parts
        per_op = self.counts.setdefault(op, {e: 0 for e in EVENTS})
        per_op[event] = per_op.get(event, 0) + 1
        if key != "-" and event in ("load", "hit"):
            self.last_use[key] = max(self.last_use.get(key, 0), ts)

    def to_dict(self) -> dict[str, Any]:
        return {"last_use": dict(sorted(self.last_use.items())), "counts": dict(sorted(self.counts.items())),
                "offsets": dict(sorted(self.offsets.items())), "folded_at": self.folded_at}


def usage_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / "v1" / USAGE_DIR


def _read_summary(directory: Path) -> Usage:
    try:
        data = json.loads((directory / SUMMARY).read_text(encoding="utf-8"))
        return Usage({str(k): int(v) for k, v in data.get("last_use", {}).items()},
                     {str(op): {str(e): int(n) for e, n in c.items()} for op, c in data.get("counts", {}).items()},
                     {str(k): int(v) for k, v in data.get("offsets", {}).items()}, int(data.get("folded_at", 0)))
    except (OSError, ValueError, TypeError, AttributeError):
        return Usage()


def _logs(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".log" and p.is_file() and not p.is_symlink())
    except OSError:
        return []


def _read_logs(directory: Path, usage: Usage) -> list[tuple[Path, int]]:
    """Add every log's unread lines to `usage`; returns (log, bytes read up to a whole line)."""
    out = []
    for log in _logs(directory):
        start = usage.offsets.get(log.name, 0)
        try:
            with open(log, "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            continue
        whole = data[:data.rfind(b"\n") + 1]  # a line being written is read by the next fold
        for line in whole.decode("utf-8", "replace").splitlines():
            usage.add_line(line)
        out.append((log, start + len(whole)))
    return out


def read_usage(root: str | os.PathLike[str]) -> Usage:
    """The summary plus the unfolded logs, read only."""
    directory = usage_dir(root)
    usage = _read_summary(directory)
    _read_logs(directory, usage)
    return usage


def _log_owner_gone(log: Path) -> bool:
    try:
        host, pid, _ = log.stem.rsplit("-", 2)
        pid_n = int(pid)
    except ValueError:
        return True
    if host != _HOST:
        return time.time() - log.stat().st_mtime > 24 * 3600
    if pid_n == os.getpid():
        return False
    try:
        os.kill(pid_n, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def fold(root: str | os.PathLike[str], *, forget: set[str] | frozenset[str] = frozenset()) -> Usage:
    """Merge the logs into summary.json, delete the logs of dead processes, drop `forget` keys
    (entries removed); returns the folded usage. Writes; call on a writable cache only."""
    from filelock import FileLock

    from kernelforge.cache.fsio import atomic_write_text

    directory = usage_dir(root)
    if not directory.is_dir():
        return Usage()
    locks = Path(root) / "v1" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(str(locks / "usage.lock")):
        usage = _read_summary(directory)
        read = _read_logs(directory, usage)
        offsets = {}
        for log, upto in read:
            try:
                if _log_owner_gone(log) and log.stat().st_size == upto:
                    log.unlink()
                    continue
            except OSError:
                continue
            offsets[log.name] = upto
        usage.offsets = offsets
        for key in forget:
            usage.last_use.pop(key, None)
        usage.folded_at = int(time.time())
        atomic_write_text(directory / SUMMARY, json.dumps(usage.to_dict(), indent=1))
    return usage


_logs_by_root: dict[Path, UsageLog] = {}


def usage_log(root: str | os.PathLike[str], writable: bool = True) -> UsageLog:
    """The process-wide log of one cache root (created on first use; opening its file is lazy)."""
    path = Path(root)
    log = _logs_by_root.get(path)
    if log is None:
        log = _logs_by_root[path] = UsageLog(path, enabled=writable)
    return log
