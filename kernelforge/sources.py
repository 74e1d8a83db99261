"""Which source files define each op's kernel, and their hash (read by the builder and runtime).

The runtime only uses artifacts built from the kernel sources it ships with, so an edited
kernel is never silently served by a stale artifact. Each op hashes only the files its
kernel is built from, so editing one kernel does not invalidate the others' artifacts.
Hashing reads a few small files and imports nothing heavy.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
KERNELS_DIR = PACKAGE_DIR / "kernels"

SHARED_SOURCES: tuple[str, ...] = ("formats.py", "kernels/convert.py", "kernels/blockscale.py",
                                   "kernels/dependent_launch.py")
OP_SOURCES: dict[str, tuple[str, ...]] = {
    "quantize": ("kernels/quantize.py",),
    "rmsnorm_quantize": ("kernels/dsmem.py", "kernels/rmsnorm_quantize.py"),
    "quantize_grouped": ("kernels/quantize_grouped.py",),
    "quantize_columnwise": ("kernels/scale_tile.py", "kernels/quantize_tiled.py"),
}


def source_files(op: str) -> list[Path]:
    """The files `op`'s kernel is built from (shared helpers, the format table, its module)."""
    try:
        own = OP_SOURCES[op]
    except KeyError:
        raise ValueError(f"op: no kernel sources registered for {op!r}; known: {sorted(OP_SOURCES)}") from None
    return [PACKAGE_DIR / rel for rel in SHARED_SOURCES + own]


def hash_files(files: list[Path]) -> str:
    """sha256 over the given files (names and bytes, in order)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def source_hash(op: str) -> str:
    """sha256 over the kernel-defining source files of `op`."""
    return hash_files(source_files(op))
