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

Reading the records back (`fold`, `read_usage`) is `cache.maintenance.usage_summary`'s job: the runtime
imports only this module.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

USAGE_DIR = "usage"
SUMMARY = "summary.json"
RECORD_ENV = "KERNELFORGE_RECORD_USAGE"
EVENTS = ("hit", "miss", "load")
HOST = "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"


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
            name = f"{HOST}-{os.getpid()}-{os.urandom(4).hex()}.log"
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


_logs_by_root: dict[Path, UsageLog] = {}


def usage_log(root: str | os.PathLike[str], writable: bool = True) -> UsageLog:
    """The process-wide log of one cache root (created on first use; opening its file is lazy)."""
    path = Path(root)
    log = _logs_by_root.get(path)
    if log is None:
        log = _logs_by_root[path] = UsageLog(path, enabled=writable)
    return log
