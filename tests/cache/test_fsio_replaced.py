"""A file that a concurrent writer keeps renaming new versions onto (the cache index, a tuning
table) is read whole, never refused: a real writer process replaces it while this one reads."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelforge.cache.read import fsio
from kernelforge.cache.read.index import read_index_checked

WRITER = r"""
import json, os, sys
path, n = sys.argv[1], 0
while True:
    n += 1
    tmp = f"{path}.tmp{n % 2}"
    with open(tmp, "w") as f:
        f.write(json.dumps({"schema": 1, "entries": {}, "n": n, "pad": "x" * (n % 997)}))
    os.replace(tmp, path)
"""


def _versions_read_while_replaced(path: Path, seconds: float, read) -> list:
    path.write_text('{"schema": 1, "entries": {}, "n": 0, "pad": ""}')
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    try:
        time.sleep(0.2)  # the writer is renaming
        out, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            out.append(read(path))
        return out
    finally:
        writer.kill()
        writer.wait()


def test_read_regular_reads_a_whole_version_while_a_writer_renames_new_ones(tmp_path):
    import json

    seen = _versions_read_while_replaced(tmp_path / "index.json", 2.0, lambda p: json.loads(fsio.read_regular(p)))
    assert len(seen) > 1000 and len({d["n"] for d in seen}) > 10, len(seen)
    assert all(d["pad"] == "x" * (d["n"] % 997) for d in seen if d["n"])  # each one whole


def test_the_cache_index_is_never_reported_unreadable_while_replaced(tmp_path):
    (tmp_path / "v1").mkdir()
    problems = _versions_read_while_replaced(tmp_path / "v1" / "index.json", 2.0,
                                             lambda p: read_index_checked(p)[1])
    assert problems and set(problems) == {None}, sorted({str(p) for p in problems})[:3]


def test_a_file_replaced_on_every_attempt_is_refused_saying_so(tmp_path, monkeypatch):
    # Every open finds a file other than the one its stat saw: a bounded number of attempts, then
    # one error naming the cause (never a loop, never the other file's bytes).
    path = tmp_path / "f.json"
    path.write_text("{}")
    other = tmp_path / "other"
    other.write_text("{}")
    real_open, opens = os.open, []

    def open_other(p, flags, *a):
        opens.append(p)
        return real_open(other, flags, *a)

    monkeypatch.setattr(fsio.os, "open", open_other)
    with pytest.raises(fsio.NotRegularFile, match="replaced by another file while being opened"):
        fsio.read_regular(path)
    assert len(opens) == fsio._OPEN_ATTEMPTS
    # a FIFO swapped in is still refused as such, without blocking
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(fsio.os, "open", lambda p, flags, *a: real_open(fifo, flags, *a))
    with pytest.raises(fsio.NotRegularFile, match=r"not a regular file \(a FIFO\)"):
        fsio.read_regular(path)
