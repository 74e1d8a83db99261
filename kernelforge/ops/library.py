"""The public ops as `torch.library` custom ops in the `kernelforge` namespace.

`torch.ops.kernelforge.quantize`, `.rmsnorm_quantize` and `.add_rmsnorm_quantize` run the same
eager code as the Python functions; their fake implementations give exact output shapes and
dtypes, so `torch.compile(fullgraph=True)` traces through them, and `add_rmsnorm_quantize`
declares that it mutates `residual`. The grouped (mixture-of-experts) ops `.quantize_experts`
and `.quantize_grouped` are registered the same way. The Python functions route here only while compiling:
in eager mode they call the loaded kernel directly (the dispatcher round trip costs
microseconds per call; see benchmarks/RESULTS.md).

`import kernelforge.ops` imports this module (registering lazily through a replacement
`torch.ops.kernelforge` namespace broke inductor's lookup of the ops by module path).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _common as c
from .quantize_grouped import experts_shapes, grouped_shapes, quantize_experts, quantize_grouped
from .quantize import quantize as _quantize
from .quantize_columnwise import RHT_SIGN_MASK, quantize_nvfp4_rht
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


def _into(out, results: tuple) -> tuple:
    """Copy op results into caller buffers (any of which may be uint8 buffers of the format's bytes)."""
    if out is None:
        return tuple(results)
    for dst, src in zip(out, results):
        dst.copy_(src if dst.dtype == src.dtype else src.view(dst.dtype))
    return tuple(out)


def traced_quantize(x, format, layout, scale_mode, global_scale, out):
    """What `kernelforge.quantize` runs while torch.compile traces it."""
    return _into(out, torch.ops.kernelforge.quantize(x, format, layout, scale_mode, global_scale))


def traced_rmsnorm_quantize(x, residual, weight, format, eps, layout, scale_mode, global_scale, out):
    """What the fused Python functions run while torch.compile traces them."""
    if residual is None:
        data, scale = torch.ops.kernelforge.rmsnorm_quantize(x, weight, format, eps, layout, scale_mode,
                                                             global_scale)
    else:
        data, scale = torch.ops.kernelforge.add_rmsnorm_quantize(x, residual, weight, format, eps, layout,
                                                                 scale_mode, global_scale)
    return _into(out, (data, scale))


def _fake_columnwise(x: Tensor, format: str, layout: str, scale_mode: str, rowwise: bool) -> tuple[Tensor, ...]:
    fmt, _, data_dtype, scale_dtype = c.format_plan(format, layout, scale_mode)
    k = x.shape[-1]
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    data, scale = _fake_outputs(x, format, layout, scale_mode) if rowwise else _no_rowwise(x, format, layout, scale_mode)
    d_shape, s_shape = c.output_shapes(fmt, (k, m), k, layout)
    return data, scale, x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype)


@torch.library.custom_op(f"{_NS}::quantize_columnwise", mutates_args=())
def quantize_columnwise_op(x: Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
                           global_scale: Optional[Tensor] = None,
                           rowwise: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Columnwise (with `rowwise`: dual) quantization; the rowwise pair is empty without it."""
    outs = _quantize(x, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale,
                     rowwise=rowwise, columnwise=True)
    return _four(x, outs, format, layout, scale_mode)


@quantize_columnwise_op.register_fake
def _(x, format, layout="linear", scale_mode="floor", global_scale=None, rowwise=True):
    return _fake_columnwise(x, format, layout, scale_mode, rowwise)


@torch.library.custom_op(f"{_NS}::quantize_nvfp4_rht", mutates_args=())
def quantize_nvfp4_rht_op(x: Tensor, global_scale_row: Optional[Tensor] = None,
                          global_scale_col: Optional[Tensor] = None, sign_mask: int = RHT_SIGN_MASK,
                          rowwise: bool = True, layout: str = "swizzled") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """NVFP4 rowwise + RHT columnwise (see `kernelforge.quantize_nvfp4_rht`); rowwise pair empty without it."""
    outs = quantize_nvfp4_rht(x, global_scale_row=global_scale_row, global_scale_col=global_scale_col,
                              sign_mask=sign_mask, rowwise=rowwise, columnwise=True, layout=layout)
    return _four(x, outs, "nvfp4", layout, "none")


@quantize_nvfp4_rht_op.register_fake
def _(x, global_scale_row=None, global_scale_col=None, sign_mask=RHT_SIGN_MASK, rowwise=True, layout="swizzled"):
    return _fake_columnwise(x, "nvfp4", layout, "none", rowwise)


def _no_rowwise(x: Tensor, format: str, layout: str, scale_mode: str) -> tuple[Tensor, Tensor]:
    """The empty rowwise pair that the four-output schemas return without the rowwise output."""
    _, _, data_dtype, scale_dtype = c.format_plan(format, layout, scale_mode)
    return x.new_empty((0,), dtype=data_dtype), x.new_empty((0,), dtype=scale_dtype)


def _four(x: Tensor, outs: tuple, format: str, layout: str, scale_mode: str) -> tuple[Tensor, ...]:
    """Pad a (data_t, scale_t) result with the empty rowwise pair of the four-output schema."""
    if len(outs) == 4:
        return tuple(outs)
    return (*_no_rowwise(x, format, layout, scale_mode), *outs)


def traced_quantize_columnwise(x, format, layout, scale_mode, global_scale, out, rowwise):
    """What `kernelforge.quantize(..., columnwise=True)` runs while torch.compile traces it."""
    res = torch.ops.kernelforge.quantize_columnwise(x, format, layout, scale_mode, global_scale, rowwise)
    return _into(out, res if rowwise else res[2:])


def traced_quantize_nvfp4_rht(x, global_scale_row, global_scale_col, sign_mask, rowwise, columnwise, layout, out):
    """What `kernelforge.quantize_nvfp4_rht` runs while torch.compile traces it."""
    if not columnwise:
        return traced_quantize(x, "nvfp4", layout, "none", global_scale_row, out)
    res = torch.ops.kernelforge.quantize_nvfp4_rht(x, global_scale_row, global_scale_col, sign_mask, rowwise, layout)
    return _into(out, res if rowwise else res[2:])


@torch.library.custom_op(f"{_NS}::quantize_experts", mutates_args=())
def quantize_experts_op(w: Tensor, format: str, layout: str = "swizzled", scale_mode: str = "floor",
                        global_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Per-expert rowwise quantization of a weight stack (see `kernelforge.quantize_experts`)."""
    return quantize_experts(w, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale)


@quantize_experts_op.register_fake
def _(w, format, layout="swizzled", scale_mode="floor", global_scale=None):
    fmt, _, data_dtype, scale_dtype = c.format_plan(format, layout, scale_mode)
    d_shape, s_shape = experts_shapes(fmt, *w.shape, layout)
    return w.new_empty(d_shape, dtype=data_dtype), w.new_empty(s_shape, dtype=scale_dtype)


@torch.library.custom_op(f"{_NS}::quantize_grouped", mutates_args=())
def quantize_grouped_op(x: Tensor, group_offsets: Tensor, format: str, scale_mode: str = "floor",
                        global_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    """Rowwise quantization of row groups with per-group swizzled scales (see `kernelforge.quantize_grouped`)."""
    return quantize_grouped(x, group_offsets, format, scale_mode=scale_mode, global_scale=global_scale)


@quantize_grouped_op.register_fake
def _(x, group_offsets, format, scale_mode="floor", global_scale=None):
    fmt, _, data_dtype, scale_dtype = c.format_plan(format, "swizzled", scale_mode)
    groups = group_offsets.shape[0]
    d_shape, s_shape = grouped_shapes(fmt, x.shape[0], x.shape[1], groups)
    return (x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype),
            group_offsets.new_empty((groups,), dtype=torch.int32))


def traced_quantize_experts(w, format, layout, scale_mode, global_scale, out):
    """What `kernelforge.quantize_experts` runs while torch.compile traces it."""
    return _into(out, torch.ops.kernelforge.quantize_experts(w, format, layout, scale_mode, global_scale))


def traced_quantize_grouped(x, group_offsets, format, scale_mode, global_scale, out):
    """What `kernelforge.quantize_grouped` runs while torch.compile traces it."""
    return _into(out, torch.ops.kernelforge.quantize_grouped(x, group_offsets, format, scale_mode, global_scale))
