"""The cache keys a selection of variants builds to (what `build --remote` pulls and pushes)."""
from __future__ import annotations

from typing import Any, Iterable

from ..sources import source_hash
from .keys import variant_key
from .toolchain import toolchain


def selection_keys(variants: Iterable[Any]) -> set[str]:
    """The key of every variant under the current toolchain and kernel sources (as the driver computes it)."""
    tc = toolchain()
    return {variant_key(v.canonical(), source_hash(v.op), tc) for v in variants}
