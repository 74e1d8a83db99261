"""The public API for the torch side of an op family (README, "Writing a kernel family").

A family's definition (`kernelforge.registry.OpFamily`) is torch- and CuTe-DSL-free; its public
functions import this module. What they get is what the built-in ops use:

* `kernel_for(op, x, **coords)`: the prebuilt kernel for a call, through the same runtime as
  the built-ins (cache layers, sha256-checked loads, tuning tables, `KernelNotBuilt` naming the
  build command); never CuTe-DSL, never a JIT.
* `TorchOp` / `torch_op`: the eager function and its `torch.library` custom op side by side.
* The argument checks and output helpers of the built-in ops (`format_plan`, `output_shapes`,
  `output_buffers`, `check_global_scale`, `global_scale_arg`, `check_device`, `check_disjoint`,
  `fake_pair`, `fast_lookup`, `fast_hit`, `fast_key`,
  `remember_fast`, `DTYPES`), so a quantizing family validates and allocates exactly as they do.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from .formats import DTYPE_BYTES, FORMATS
from .ops.checks import (
    DTYPES,
    check_device,
    check_disjoint,
    check_global_scale,
    fake_pair,
    format_plan,
    global_scale_arg,
    output_buffers,
    output_shapes,
    results,
)
from .ops.fast_path import fast_hit, fast_key, fast_lookup, remember_fast
from .ops.launch import kernel_for as _kernel_for
from .ops.torch_op import TorchOp, copy_into, torch_op
from .registry import OpFamily, find_family

_RUNTIME_AXES = ("kclass", "arch")  # chosen by the runtime from the input and the GPU, never passed


def dispatch_axes(family: OpFamily) -> tuple[str, ...]:
    """The coordinates a call passes to `kernel_for` for `family`: its dispatch axes but the
    K-class and the arch."""
    return tuple(a for a in family.schema.dispatch_axes if a not in _RUNTIME_AXES)


# op -> (its family, the coordinate names it takes): checked once per family, not per call.
_COORDS: dict[str, tuple[OpFamily, frozenset[str]]] = {}


def kernel_for(op: str, x: torch.Tensor, *, k: Optional[int] = None, rows: Optional[int] = None,
               row_stride: Optional[int] = None, block: int = 1, **coords: Any) -> Callable[..., Any]:
    """The loaded kernel function of `op` for input `x` at dispatch coordinates `coords`.

    `coords` names every dispatch axis of the family but `kclass` and `arch` (values as the
    spec writes them, e.g. `format="mxfp8", layout="linear", dtype="bfloat16"`). The K-class is
    the most specialized built one accepting K = `k` (default: x's last dimension) in blocks of
    `block`, x's pointer alignment, its row stride in elements `row_stride` (default x's
    second-to-last stride, or K for one row) and `rows` rows (default: x's elements / K); the
    arch is the GPU's of x. Memoized per distinct (coordinates, device, K, alignment class,
    M bucket): a repeated call costs a dict lookup.

    Raises ValueError for an unknown op, missing or unknown coordinates or a non-CUDA x;
    `kernelforge.errors.KernelNotBuilt` (with the build command) when nothing is built for
    them, `UnsupportedShape` when no built K-class accepts this input.
    """
    fam = find_family(op)
    if fam is None:
        raise ValueError(f"op: no op family named {op!r} (is its package installed?)")
    known = _COORDS.get(op)
    if known is None or known[0] is not fam:
        known = _COORDS[op] = (fam, frozenset(dispatch_axes(fam)))
    if coords.keys() != known[1]:
        want = dispatch_axes(fam)
        missing = sorted(set(want) - set(coords))
        extra = sorted(set(coords) - set(want))
        raise ValueError(f"coords: {op} dispatches on {list(want)}"
                         + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"x: expected a CUDA tensor, got a tensor on {x.device}")
    if x.dim() == 0:
        raise ValueError("x: expected at least one dimension")
    kk = x.shape[-1] if k is None else k
    m = (x.numel() // x.shape[-1] if x.shape[-1] else 0) if rows is None else rows
    es = x.element_size()
    if row_stride is None:
        row_stride = x.stride(-2) if x.dim() >= 2 and m > 1 else kk
    key = tuple(sorted((a, str(v)) for a, v in coords.items()))
    return _kernel_for(op, key, x.device.index, kk, block, x.data_ptr(), row_stride * es, m)


__all__ = ["DTYPES", "DTYPE_BYTES", "FORMATS", "OpFamily", "TorchOp", "check_device", "check_disjoint",
           "check_global_scale", "copy_into", "dispatch_axes", "fake_pair", "fast_hit", "fast_key", "fast_lookup",
           "format_plan", "global_scale_arg",
           "kernel_for", "output_buffers", "output_shapes", "remember_fast", "results", "torch_op"]
