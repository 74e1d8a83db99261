"""Reading the usage records back (`cache.read.usage` writes them; the runtime never reads them).

`fold` (run by `cache gc`, under `locks/usage.lock`) merges the logs into `usage/summary.json`
(last use per key, counts per op, and how far each live log was read) and deletes the logs of
dead processes; `read_usage` gives the same view without writing (for `cache stats`).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.read.fsio import atomic_write_text, open_regular, read_regular
from kernelforge.cache.read.usage import EVENTS, HOST, SUMMARY, USAGE_DIR


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
        data = json.loads(read_regular(directory / SUMMARY))
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
            fd, _ = open_regular(log)
            try:
                os.lseek(fd, start, os.SEEK_SET)
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                data = b"".join(chunks)
            finally:
                os.close(fd)
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
    if host != HOST:
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
    from filelock import FileLock  # only writers pay for it

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
