"""Which source files define the kernels, and their hash (read by the builder and the runtime).

The runtime only uses artifacts built from the kernel sources it ships with, so an edited
kernel is never silently served by a stale artifact. Hashing reads a few small files and
imports nothing heavy.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
KERNELS_DIR = PACKAGE_DIR / "kernels"


def source_files() -> list[Path]:
    """The kernels package plus the format table the kernels read."""
    return sorted(KERNELS_DIR.glob("*.py")) + [PACKAGE_DIR / "formats.py"]


def source_hash(files: list[Path] | None = None) -> str:
    """sha256 over the kernel-defining source files (names and bytes)."""
    if files is None:
        return _default_source_hash()
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _default_source_hash() -> str:
    return source_hash(source_files())
