"""Which source files define each op's kernel, and their hash (read by the builder and runtime).

The runtime only uses artifacts built from the kernel sources it ships with, so an edited
kernel is never silently served by a stale artifact. Each op hashes only the files its
kernel is built from, so editing one kernel does not invalidate the others' artifacts.
Hashing reads a few small files and imports nothing heavy. Each op's own files are listed by
its op family (`kernelforge.registry`); `OP_SOURCES` is a view over the registry.
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from pathlib import Path

from .registry import FamilyView, find_family, on_change

PACKAGE_DIR = Path(__file__).resolve().parent
KERNELS_DIR = PACKAGE_DIR / "kernels"

# The shared CuTe-DSL helpers every kernel may import (the public `kernelforge.kernels`) and the
# format table: hashed into every op's key.
SHARED_SOURCES: tuple[str, ...] = ("formats.py", "kernels/__init__.py", "kernels/convert.py", "kernels/blockscale.py",
                                   "kernels/dependent_launch.py", "kernels/dsmem.py", "kernels/fakes.py")
# op -> its family's own source files (as the family lists them: relative to its source root).
OP_SOURCES: Mapping[str, tuple[str | Path, ...]] = FamilyView(lambda f: f.sources)


def source_files(op: str) -> list[Path]:
    """The files `op`'s kernel is built from (shared helpers, the format table, its own files)."""
    fam = find_family(op)
    if fam is None:
        raise ValueError(f"op: no kernel sources registered for {op!r}; known: {sorted(OP_SOURCES)}")
    return [PACKAGE_DIR / rel for rel in SHARED_SOURCES] + fam.source_paths()


def hash_files(files: list[Path]) -> str:
    """sha256 over the given files (names and bytes, in order)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def source_hash(op: str) -> str:
    """sha256 over the kernel-defining source files of `op`; for an op a plugin defines, also
    over the plugin's distribution name and version (the built-ins' hash is of the files alone)."""
    h = hash_files(source_files(op))
    fam = find_family(op)
    if fam is not None and fam.distribution:
        h = hashlib.sha256(f"{h}\0{fam.distribution}\0{fam.version}".encode()).hexdigest()
    return h


on_change(source_hash.cache_clear)
