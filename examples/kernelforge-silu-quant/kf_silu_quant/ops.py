"""`silu_mul_quantize`: the torch-facing op (validate, allocate, dispatch to the prebuilt kernel).

Written on kernelforge's public torch-side API for op families, `kernelforge.extend`: kernels
are served by kernelforge's runtime (cache layers, sha256-checked loads, tuning tables), never
by CuTe-DSL (this module does not import cutlass); the op is a `TorchOp`, i.e. the eager
function in eager mode and the `kf_silu_quant::silu_mul_quantize` custom op under torch.compile.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernelforge import extend as kf

from .family import FORMATS, OP

HALF = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def silu_mul_quantize(
    x: torch.Tensor,
    format: str,
    *,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-scaled quantization of h = dtype(silu(g) * u) along N, for x = [g | u] of shape [..., 2N].

    x: bfloat16 or float16 CUDA tensor, last dimension 2N contiguous (row stride free), N a
    multiple of the format's block B (32 for mxfp8, 16 for nvfp4). silu and the product are
    computed in fp32 and rounded once to x's dtype (README "Numerics"), then quantized exactly
    as `kernelforge.quantize(h, ...)`. Returns `(data, scale)`: data `[..., N]` float8_e4m3fn
    (mxfp8) or `[..., N/2]` float4_e2m1fn_x2 (nvfp4); scale `[M, N/B]` (linear) or
    `[roundup(M,128), roundup(N/B,4)]` (swizzled, padding zero), M = x's leading dimensions
    flattened; float8_e8m0fnu (mxfp8, `scale_mode` "floor" or "rceil") or float8_e4m3fn
    (nvfp4, fp32 `global_scale` [1] on x's device, None meaning 1.0). `out=(data, scale)`
    writes into caller buffers of exactly those shapes and dtypes (uint8 accepted) that
    overlap neither each other nor x; a repeated call into the same buffers skips the checks.
    Every argument is checked before anything is launched. Under torch.compile this is the
    `kf_silu_quant::silu_mul_quantize` custom op.
    """
    if torch.compiler.is_compiling():
        return kf.copy_into(out, silu_mul_quantize_op.custom(x, format, layout, scale_mode, global_scale))
    key = None  # the fast-path memo's key, also what a checked call into out= is remembered under
    if out is not None:  # the same buffers again, with an input like the last one
        hit, key = kf.fast_lookup(OP, x, out, (format, layout, scale_mode), (global_scale,))
        if hit is not None:
            try:
                hit.fn(x, out[0], out[1], hit.arg)  # remembered for 2-D x and data only
                return out[0], out[1]
            except Exception:  # noqa: BLE001 - e.g. the kernel's own argument checks (a misaligned
                pass  # x): the checked path explains it
    fmt, mode, data_dtype, scale_dtype = check_format(format, layout, scale_mode)
    dtype, n = check_input(x, fmt)
    shape = x.shape
    k2 = shape[-1]
    device = x.device
    if global_scale is not None:
        kf.check_global_scale(global_scale, fmt, device)
    m = math.prod(shape[:-1])
    x2 = x if len(shape) == 2 else x.reshape(m, k2)
    d_shape, s_shape = kf.output_shapes(fmt, (*shape[:-1], n), m, layout)
    data, scale = kf.output_buffers(out, device, d_shape, s_shape, data_dtype, scale_dtype,
                                    (("x", x), ("global_scale", global_scale)))
    if m and n:
        fn = kf.kernel_for(OP, x2, k=n, rows=m, row_stride=x2.stride(0) if m > 1 else k2, block=fmt.block,
                           format=fmt.name, scale_mode=mode, layout=layout, dtype=dtype)
        g_arg = kf.global_scale_arg(fmt, global_scale, device)
        fn(x2, data if len(d_shape) == 2 else data.view(m, d_shape[-1]), scale, g_arg)
        if key is not None and x2 is x and data is out[0] and scale is out[1]:
            kf.remember_fast(key, fn, (data, scale, global_scale), g_arg, x, (data, scale))
    elif s_shape[0] * s_shape[1]:
        scale.view(torch.uint8).zero_()  # nothing to quantize: the swizzle padding is zero
    return kf.results(out, data, scale)


def check_format(format: object, layout: object, scale_mode: object):
    """(format, effective scale mode) after kernelforge's checks, for this op's formats only."""
    if format not in FORMATS:
        raise ValueError(f"format: expected one of {list(FORMATS)}, got {format!r}")
    return kf.format_plan(format, layout, scale_mode)


def check_input(x: object, fmt) -> tuple[str, int]:
    """(dtype name, N) of a valid x [..., 2N]; raises naming `x` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    dtype = HALF.get(x.dtype)
    if dtype is None:
        raise ValueError(f"x: expected dtype bfloat16 or float16, got {x.dtype}")
    if not x.shape:
        raise ValueError("x: expected at least one dimension (gate | up, 2N columns)")
    k2 = x.shape[-1]
    if k2 % 2 or (k2 // 2) % fmt.block:
        raise ValueError(f"x: the last dimension ({k2}) must be 2N (gate | up) with N a multiple of the "
                         f"{fmt.name} block size B = {fmt.block}")
    if k2 and x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    return dtype, k2 // 2


def _fake(x: torch.Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
          global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty outputs of the shapes and dtypes the op returns (torch.compile's fake implementation)."""
    fmt, _, data_dtype, scale_dtype = check_format(format, layout, scale_mode)
    n = x.shape[-1] // 2
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    d_shape, s_shape = kf.output_shapes(fmt, (*x.shape[:-1], n), m, layout)
    return x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype)


@kf.torch_op("kf_silu_quant::silu_mul_quantize", fake=_fake)
def silu_mul_quantize_op(x: torch.Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
                         global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU-and-mul + block-scaled quantization into fresh outputs (see `silu_mul_quantize`)."""
    return silu_mul_quantize(x, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale)


__all__ = ["silu_mul_quantize", "silu_mul_quantize_op"]
