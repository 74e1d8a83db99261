"""Deterministic partitions of a build by cache key (`kernelforge build --shard I/N`).

Shards are 1-based: shard I of N holds the variants whose key, read as a hexadecimal number,
is I-1 modulo N. Keys are sha256 digests of the variant, its sources and the toolchain, so the
partition is the same on every machine and every run of the same checkout and toolchain, and
the N shards together hold each selected variant exactly once.
"""
from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")

SHARD_HELP = "expected I/N with integers 1 <= I <= N (shards are 1-based), e.g. --shard 1/4"


def parse_shard(text: str) -> tuple[int, int]:
    """(I, N) from "I/N"; ValueError naming --shard and the expected form otherwise."""
    index_text, sep, count_text = str(text).strip().partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index = count = 0
    if not sep or not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: {SHARD_HELP}")
    return index, count


def in_shard(key: str, shard: tuple[int, int]) -> bool:
    """Whether the variant with cache key `key` (hex) belongs to shard (I, N)."""
    index, count = shard
    return int(key, 16) % count == index - 1


def shard_of(keyed: Sequence[tuple[T, str]], shard: tuple[int, int] | None) -> list[tuple[T, str]]:
    """The (item, key) pairs of `keyed` in `shard`, in their order (all of them if shard is None)."""
    return [(item, key) for item, key in keyed if shard is None or in_shard(key, shard)]

