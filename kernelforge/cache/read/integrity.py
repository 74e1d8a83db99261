"""Whether an entry's files on disk are the ones it records (regular files, sizes, sha256)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import file_kind, hash_stream, open_regular

MISSING_DIR = "missing dir"
MISSING_FILE = "missing file"
SIZE_MISMATCH = "size mismatch"
SHA_MISMATCH = "sha256 mismatch"
NOT_A_FILE = "not a regular file"


def sha256_file(path: Path, *, fsync: bool = False) -> tuple[str, int]:
    """(sha256 hex digest, size in bytes) of a regular file, read in chunks; optionally fsync it
    while it is open. A FIFO, socket or device raises NotRegularFile (an OSError) unopened."""
    fd, _ = open_regular(path)
    try:
        result = hash_stream(lambda n: os.read(fd, n))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return result


def file_problems(entry: Entry, directory: Path) -> list[tuple[str, str, str]]:
    """What is wrong with `entry`'s files under `directory`: (problem, file, detail) each; [] if intact."""
    if directory.is_symlink() or not directory.is_dir():
        return [(MISSING_DIR, "", str(directory) + (" is a symlink" if directory.is_symlink() else ""))]
    out = []
    for rel, info in entry.files.items():
        path = directory / rel
        try:
            st = os.lstat(path)
        except OSError:
            out.append((MISSING_FILE, rel, ""))
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append((NOT_A_FILE, rel, file_kind(st.st_mode)))
        elif st.st_size != int(info["size"]):
            out.append((SIZE_MISMATCH, rel, f"expected {info['size']} bytes, found {st.st_size}"))
        else:
            try:
                digest, _ = sha256_file(path)
            except OSError as exc:  # swapped for a FIFO, a symlink, ... since the lstat
                out.append((NOT_A_FILE, rel, exc.strerror or str(exc)))
                continue
            if digest != info["sha256"]:
                out.append((SHA_MISMATCH, rel, f"expected {info['sha256'][:16]}, found {digest[:16]}"))
    return out
