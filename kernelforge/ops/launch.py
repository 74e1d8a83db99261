"""The process-wide dispatch table and the memoized kernel lookup of one call (device
capability and name, K, alignment class, M bucket -> the loaded function)."""

import os
from pathlib import Path
from typing import Callable, Optional

import torch

from ..cache.read.layers import resolve_layers
from ..runtime.arch import arch_specific
from ..runtime.dispatch import DispatchTable
from ..runtime.tuning import m_bucket
from . import fast_path

_table: Optional[DispatchTable] = None


_capability: dict[int, tuple[int, int]] = {}


_names: dict[int, str] = {}


_fn_cache: dict[tuple, Callable] = {}


def set_cache_root(path: Optional[str | os.PathLike]) -> Path:
    """Use the cache at `path` alone (None: re-resolve: $KERNELFORGE_CACHE_DIR alone, else the
    checkout's or user's cache followed by the installed kernel wheels). Returns the first root."""
    global _table
    layers = resolve_layers(path, remember=True)
    _table = DispatchTable(layers=layers)
    fast_path.fast_calls.clear()
    return layers[0].root


def dispatch_table() -> DispatchTable:
    """The process-wide dispatch table (created on first use from the resolved cache root)."""
    if _table is None:
        set_cache_root(None)
    return _table  # type: ignore[return-value]


def device_capability(index: int) -> tuple[int, int]:
    cap = _capability.get(index)
    if cap is None:
        cap = _capability[index] = torch.cuda.get_device_capability(index)
    return cap


def device_name(index: int) -> str:
    """The device's name (what tuning tables are keyed by)."""
    name = _names.get(index)
    if name is None:
        name = _names[index] = torch.cuda.get_device_name(index)
    return name


_staging: dict[tuple, "dict[str, int | None] | None"] = {}


def staging_rule(dev: int) -> "dict[str, int | None] | None":
    """The columnwise op's staged linear-scale rule measured on this device (its tuning table's
    `staging`, `DispatchTable.staging_rule`), or None: the shipped rule applies. Looked up once per
    device and dispatch table (the arch-specific name of the device's capability, as `tune` records)."""
    table = dispatch_table()
    memo = (dev, table)
    if memo not in _staging:
        _staging[memo] = table.staging_rule(device_name(dev), arch_specific(device_capability(dev)))
    return _staging[memo]


def kernel_for(op: str, coords: tuple[tuple[str, str], ...], dev: int, k: int, block: int,
               ptr: int, stride_bytes: int, m: int) -> Callable:
    """The loaded function for `op` at `coords` (sorted (axis, value) pairs) and this input.

    The K-class choice depends on K, on the pointer alignment up to 16 bytes and on the row
    stride mod 16 (every vector_bytes divides 16) and M mod 128 (every m_multiple divides 128),
    the tuned build on the bucket of M, so memoizing on exactly these is exact.
    """
    align = ptr & -ptr if ptr else 1 << 30
    table = dispatch_table()
    bucket = m_bucket(m)
    memo = (op, coords, dev, k, min(align, 16), stride_bytes % 16, bucket, m & 127, table)
    fn = _fn_cache.get(memo)
    if fn is None:
        fn, _ = table.resolve(op, dict(coords), device_capability(dev), k, block, align, stride_bytes, m,
                              device_name(dev))
        _fn_cache[memo] = fn
    return fn
