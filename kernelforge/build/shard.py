"""Deterministic partitions of a build by cache key (`kernelforge build --shard I/N`).

Shards are 1-based: shard I of N holds the variants whose key, read as a hexadecimal number,
is I-1 modulo N. Keys are sha256 digests of the variant, its sources and the toolchain, so the
partition is the same on every machine and every run of the same checkout and toolchain, and
the N shards together hold each selected variant exactly once.
"""
from __future__ import annotations

import re
from typing import Sequence, TypeVar

T = TypeVar("T")

MAX_SHARDS = 4096  # more shards than variants builds nothing but the runtime library; this is far more
SHARD_HELP = (f"expected I/N with integers 1 <= I <= N <= {MAX_SHARDS} (shards are 1-based), e.g. --shard 1/4")


def parse_shard(text: str) -> tuple[int, int]:
    """(I, N) from "I/N" (ASCII digits, N at most MAX_SHARDS); ValueError naming --shard and the
    expected form otherwise."""
    m = re.fullmatch(r"\s*([0-9]{1,9})/([0-9]{1,9})\s*", str(text), re.ASCII)
    index, count = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not 1 <= index <= count <= MAX_SHARDS:
        raise ValueError(f"--shard {text!r}: {SHARD_HELP}")
    return index, count


def in_shard(key: str, shard: tuple[int, int]) -> bool:
    """Whether the variant with cache key `key` (hex) belongs to shard (I, N)."""
    index, count = shard
    return int(key, 16) % count == index - 1


def shard_of(keyed: Sequence[tuple[T, str]], shard: tuple[int, int] | None) -> list[tuple[T, str]]:
    """The (item, key) pairs of `keyed` in `shard`, in their order (all of them if shard is None)."""
    return [(item, key) for item, key in keyed if shard is None or in_shard(key, shard)]

