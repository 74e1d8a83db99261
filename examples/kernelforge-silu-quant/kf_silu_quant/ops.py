"""`silu_mul_quantize`: the torch-facing op (validate, allocate, dispatch to the prebuilt kernel).

Kernels are served by kernelforge's runtime (cache layers, sha256-checked loads, tuning
tables); this module never imports cutlass. Until `kernelforge.extend` (the public torch-side
API for op families) lands, it uses the helpers the built-in ops use, `kernelforge.ops._common`.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernelforge.formats import DTYPE_BYTES
from kernelforge.ops import _common as c

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
    overlap neither each other nor x. Every argument is checked before anything is launched.
    """
    if format not in FORMATS:
        raise ValueError(f"format: expected one of {list(FORMATS)}, got {format!r}")
    fmt, mode, data_dtype, scale_dtype = c.format_plan(format, layout, scale_mode)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    dtype = HALF.get(x.dtype)
    if dtype is None:
        raise ValueError(f"x: expected dtype bfloat16 or float16, got {x.dtype}")
    shape = x.shape
    if not shape:
        raise ValueError("x: expected at least one dimension (gate | up, 2N columns)")
    k2 = shape[-1]
    if k2 % 2 or (k2 // 2) % fmt.block:
        raise ValueError(f"x: the last dimension ({k2}) must be 2N (gate | up) with N a multiple of the "
                         f"{fmt.name} block size B = {fmt.block}")
    n = k2 // 2
    device = x.device
    if global_scale is not None:
        c.check_global_scale(global_scale, fmt, device)
    if k2 and x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    x2 = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), k2)
    m = x2.shape[0]
    d_shape, s_shape = c.output_shapes(fmt, (*shape[:-1], n), m, layout)
    data, scale = c.output_buffers(out, device, d_shape, s_shape, data_dtype, scale_dtype,
                                   (("x", x), ("global_scale", global_scale)))
    if m and n:
        es = DTYPE_BYTES[dtype]
        stride_bytes = x2.stride(0) * es if m > 1 else k2 * es
        fn = c.kernel_for(OP, (("dtype", dtype), ("format", fmt.name), ("layout", layout), ("scale_mode", mode)),
                          device.index, n, fmt.block, x2.data_ptr(), stride_bytes, m)
        fn(x2, data if len(d_shape) == 2 else data.view(m, d_shape[-1]), scale,
           c.global_scale_arg(fmt, global_scale, device))
    elif s_shape[0] * s_shape[1]:
        scale.view(torch.uint8).zero_()  # nothing to quantize: the swizzle padding is zero
    return c.results(out, data, scale)


__all__ = ["silu_mul_quantize"]
