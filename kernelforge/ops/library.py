"""The public ops as `torch.library` custom ops in the `kernelforge` namespace.

`torch.ops.kernelforge.quantize`, `.rmsnorm_quantize` and `.add_rmsnorm_quantize` run the same
eager code as the Python functions; their fake implementations give exact output shapes and
dtypes, so `torch.compile(fullgraph=True)` traces through them, and `add_rmsnorm_quantize`
declares that it mutates `residual`. The Python functions route here only while compiling:
in eager mode they call the loaded kernel directly (the dispatcher round trip costs
microseconds per call; see benchmarks/RESULTS.md).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _common as c
from .quantize import quantize as _quantize
from .rmsnorm_quantize import _run as _rmsnorm_run

_NS = "kernelforge"


def _fake_outputs(x: Tensor, format: str, layout: str, scale_mode: str) -> tuple[Tensor, Tensor]:
    fmt, _, data_dtype, scale_dtype = c.format_plan(format, layout, scale_mode)
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    d_shape, s_shape = c.output_shapes(fmt, tuple(x.shape), m, layout)
    return x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype)


@torch.library.custom_op(f"{_NS}::quantize", mutates_args=())
def quantize_op(x: Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
                global_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Rowwise block-scaled quantization (see `kernelforge.quantize`)."""
    return _quantize(x, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale)


@quantize_op.register_fake
def _(x, format, layout="linear", scale_mode="floor", global_scale=None):
    return _fake_outputs(x, format, layout, scale_mode)


@torch.library.custom_op(f"{_NS}::rmsnorm_quantize", mutates_args=())
def rmsnorm_quantize_op(x: Tensor, weight: Tensor, format: str, eps: float = 1e-6, layout: str = "linear",
                        scale_mode: str = "floor", global_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Fused RMSNorm + quantize (see `kernelforge.rmsnorm_quantize`)."""
    return _rmsnorm_run(x, None, weight, format, eps, layout, scale_mode, global_scale, None)


@rmsnorm_quantize_op.register_fake
def _(x, weight, format, eps=1e-6, layout="linear", scale_mode="floor", global_scale=None):
    return _fake_outputs(x, format, layout, scale_mode)


@torch.library.custom_op(f"{_NS}::add_rmsnorm_quantize", mutates_args=("residual",))
def add_rmsnorm_quantize_op(x: Tensor, residual: Tensor, weight: Tensor, format: str, eps: float = 1e-6,
                            layout: str = "linear", scale_mode: str = "floor",
                            global_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Fused add + RMSNorm + quantize; `residual` is overwritten (see `kernelforge.add_rmsnorm_quantize`)."""
    return _rmsnorm_run(x, residual, weight, format, eps, layout, scale_mode, global_scale, None)


@add_rmsnorm_quantize_op.register_fake
def _(x, residual, weight, format, eps=1e-6, layout="linear", scale_mode="floor", global_scale=None):
    return _fake_outputs(x, format, layout, scale_mode)


def _into(out, data: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """Copy op results into caller buffers (which may be uint8 buffers of the format's bytes)."""
    if out is None:
        return data, scale
    for dst, src in zip(out, (data, scale)):
        dst.copy_(src if dst.dtype == src.dtype else src.view(dst.dtype))
    return out[0], out[1]


def traced_quantize(x, format, layout, scale_mode, global_scale, out):
    """What `kernelforge.quantize` runs while torch.compile traces it."""
    data, scale = torch.ops.kernelforge.quantize(x, format, layout, scale_mode, global_scale)
    return _into(out, data, scale)


def traced_rmsnorm_quantize(x, residual, weight, format, eps, layout, scale_mode, global_scale, out):
    """What the fused Python functions run while torch.compile traces them."""
    if residual is None:
        data, scale = torch.ops.kernelforge.rmsnorm_quantize(x, weight, format, eps, layout, scale_mode,
                                                             global_scale)
    else:
        data, scale = torch.ops.kernelforge.add_rmsnorm_quantize(x, residual, weight, format, eps, layout,
                                                                 scale_mode, global_scale)
    return _into(out, data, scale)
