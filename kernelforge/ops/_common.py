"""Shared plumbing of the public ops: the process-wide dispatch table, devices, `out=` checks."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch

from ..config import resolve_cache_root
from ..runtime.dispatch import DispatchTable

_table: Optional[DispatchTable] = None
_capability: dict[int, tuple[int, int]] = {}


def set_cache_root(path: Optional[str | os.PathLike]) -> Path:
    """Use the cache at `path` (None: re-resolve from $KERNELFORGE_CACHE_DIR / defaults)."""
    global _table
    root, _ = resolve_cache_root(path)
    _table = DispatchTable(root)
    return root


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


def check_out(out: object, device: torch.device, d_shape: tuple, s_shape: tuple,
              data_dtype: torch.dtype, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate caller-provided `(data, scale)` buffers; return them as uint8 tensors."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"out: expected a (data, scale) tuple of tensors, got {type(out).__name__}")
    return (_check_buffer("out[0] (data)", out[0], d_shape, data_dtype, 16, device),
            _check_buffer("out[1] (scale)", out[1], s_shape, scale_dtype, 4, device))


def _check_buffer(name: str, t: object, shape: tuple, dtype: torch.dtype, align: int,
                  device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    tdtype = t.dtype
    if tdtype is not dtype and tdtype is not torch.uint8:
        raise ValueError(f"{name}: expected dtype {dtype} (or torch.uint8), got {tdtype}")
    if t.shape != shape:
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of x), got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor")
    if t.data_ptr() % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned data pointer")
    return t if tdtype is torch.uint8 else t.view(torch.uint8)
