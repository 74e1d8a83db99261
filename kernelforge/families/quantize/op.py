"""`kernelforge.quantize` and `kernelforge.nvfp4_global_scale`: validate, allocate, dispatch."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernelforge.families.quantize_columnwise import op as cw
from kernelforge.formats import DTYPE_BYTES
from kernelforge.ops import checks, fast_path, launch
from kernelforge.ops.torch_op import TorchOp, copy_into


def quantize(
    x: torch.Tensor,
    format: str,
    *,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, ...]] = None,
    rowwise: bool = True,
    columnwise: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Block-scaled quantization of `x` along its last dimension (docs/numerics.md).

    Returns `(data, scale)`. `data` keeps the leading dimensions of x: `[..., K]` float8_e4m3fn
    for MXFP8, `[..., K/2]` float4_e2m1fn_x2 for MXFP4/NVFP4. `scale` is 2-D with the leading
    dimensions flattened to M: `[M, K/B]` (linear) or `[roundup(M,128), roundup(K/B,4)]`
    (swizzled, padding zero); float8_e8m0fnu for MX formats, float8_e4m3fn for NVFP4.
    `scale_mode` ("floor" or "rceil") applies to MX formats. `global_scale` is NVFP4's fp32
    encode scale, a [1] tensor on x's device (None means 1.0); its value is read on the device
    and not checked: a NaN, zero, negative or infinite one gives the defined bytes listed in
    docs/numerics.md, NVFP4 section (what `reference.quantize_ref` computes, this family's
    reference.py). `out=(data, scale)` writes into caller buffers of exactly those shapes and
    dtypes (uint8 is accepted as well) that overlap neither each other nor x or global_scale.
    Every argument is checked before anything is launched. Under torch.compile this is the
    `kernelforge::quantize` op.

    `columnwise=True` quantizes `x.T` (leading dimensions flattened to M, which must be a
    multiple of B): `data_t` [K, M*bits/8] and `scale_t` in the same layout, byte for byte
    what rowwise quantization of `x.T.contiguous()` gives. With `rowwise=True` as well, one
    kernel reads x once and returns `(data, scale, data_t, scale_t)`; with `rowwise=False` it
    returns `(data_t, scale_t)`. `out` then takes a tuple of the same length.
    """
    if columnwise or rowwise is not True:
        return _columnwise(x, format, layout, scale_mode, global_scale, out, rowwise, columnwise)
    if torch.compiler.is_compiling():
        return copy_into(out, quantize_op.custom(x, format, layout, scale_mode, global_scale))
    key = None  # the fast-path memo's key, also what a checked call is remembered under
    try:
        if out is not None:  # the same buffers again, with an input like the last one
            d, s = out
            key = ("quantize", x.shape, x.stride(), x.dtype, x.get_device(), format, layout, scale_mode,
                   id(d), id(s), id(global_scale))
            hit = fast_path.fast_hit(key, x)
            if hit is not None:
                hit.fn(x, d, s, hit.arg)
                return d, s
        else:  # fresh outputs for an input like the last one
            key = ("quantize", x.shape, x.stride(), x.dtype, x.get_device(), format, layout, scale_mode,
                   id(global_scale))
            hit = fast_path.fast_hit(key, x)
            if hit is not None:
                d, s = fast_path.allocate(hit)
                hit.fn(x, d, s, hit.arg)
                return d, s
    except Exception:  # noqa: BLE001 - anything odd (including the kernel's own argument
        pass  # checks, e.g. a misaligned x) takes the checked path, which explains it
    fmt, mode, data_dtype, scale_dtype = checks.format_plan(format, layout, scale_mode)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    dtype = checks.DTYPES.get(x.dtype)
    if dtype is None:
        raise ValueError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    shape = x.shape
    if not shape:
        raise ValueError("x: expected at least one dimension (the K dimension)")
    k = shape[-1]
    if k % fmt.block:
        raise ValueError(f"x: K = {k} (the last dimension) must be a multiple of the {fmt.name} "
                         f"block size B = {fmt.block}")
    device = x.device
    if global_scale is not None:
        checks.check_global_scale(global_scale, fmt, device)
    if k and x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")

    x2 = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), k)  # -1 fails when K = 0
    m = x2.shape[0]
    d_shape, s_shape = checks.output_shapes(fmt, shape, m, layout)
    data, scale = checks.output_buffers(out, device, d_shape, s_shape, data_dtype, scale_dtype,
                                   (("x", x), ("global_scale", global_scale)))
    if m and k:
        es = DTYPE_BYTES[dtype]
        stride_bytes = x2.stride(0) * es if m > 1 else k * es
        fn = launch.kernel_for("quantize", (("dtype", dtype), ("format", fmt.name), ("layout", layout),
                                       ("scale_mode", mode)),
                          device.index, k, fmt.block, x2.data_ptr(), stride_bytes, m)
        g_arg = checks.global_scale_arg(fmt, global_scale, device)
        fn(x2, data if len(d_shape) == 2 else data.view(m, d_shape[-1]), scale, g_arg)
        if key is not None and x2 is x and len(d_shape) == 2:
            if out is None:
                fast_path.remember_fast(key, fn, (global_scale,), g_arg, x, (),
                                (d_shape, s_shape, data_dtype, scale_dtype, device))
            elif data is out[0] and scale is out[1]:
                fast_path.remember_fast(key, fn, (data, scale, global_scale), g_arg, x, (data, scale))
    elif s_shape[0] * s_shape[1]:
        scale.view(torch.uint8).zero_()  # K = 0 with padded rows: nothing to quantize, padding is zero
    return checks.results(out, data, scale)


def _columnwise(x, format, layout, scale_mode, global_scale, out, rowwise, columnwise) -> tuple[torch.Tensor, ...]:
    """The columnwise / dual path of `quantize` (kernels of the `quantize_columnwise` op)."""
    for name, v in (("rowwise", rowwise), ("columnwise", columnwise)):
        if not isinstance(v, bool):
            raise TypeError(f"{name}: expected a bool, got {type(v).__name__}")
    if not columnwise:
        raise ValueError("rowwise, columnwise: at least one output must be requested")
    if torch.compiler.is_compiling():
        res = quantize_columnwise_op.custom(x, format, layout, scale_mode, global_scale, rowwise)
        return copy_into(out, res if rowwise else res[2:])
    key = fast_path.fast_key("quantize_columnwise", x, out, (format, layout, scale_mode, rowwise), (global_scale,))
    if key is not None:
        hit = fast_path.fast_hit(key, x)
        if hit is not None and cw.repeat(hit, x, out):
            return tuple(out)
    fmt, mode, data_dtype, scale_dtype = cw.format_and_input(x, format, layout, scale_mode)
    return cw.run(x, fmt, mode, layout, data_dtype, scale_dtype, rowwise, global_scale, None, out, key=key)


def _quantize_custom(x: torch.Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
                     global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise block-scaled quantization (see `kernelforge.quantize`)."""
    return quantize(x, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale)


def _quantize_columnwise_custom(x: torch.Tensor, format: str, layout: str = "linear", scale_mode: str = "floor",
                                global_scale: Optional[torch.Tensor] = None,
                                rowwise: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Columnwise (with `rowwise`: dual) quantization; the rowwise pair is empty without it."""
    outs = quantize(x, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale,
                    rowwise=rowwise, columnwise=True)
    return checks.four(x, outs, format, layout, scale_mode)


quantize_op = TorchOp("kernelforge::quantize", _quantize_custom,
                      schema='(Tensor x, str format, str layout="linear", str scale_mode="floor", '
                             'Tensor? global_scale=None) -> (Tensor, Tensor)',
                      fake=lambda x, format, layout="linear", scale_mode="floor", global_scale=None:
                      checks.fake_pair(x, format, layout, scale_mode))
quantize_columnwise_op = TorchOp("kernelforge::quantize_columnwise", _quantize_columnwise_custom,
                                 schema='(Tensor x, str format, str layout="linear", str scale_mode="floor", '
                                        'Tensor? global_scale=None, bool rowwise=True) '
                                        '-> (Tensor, Tensor, Tensor, Tensor)',
                                 fake=lambda x, format, layout="linear", scale_mode="floor", global_scale=None,
                                 rowwise=True: checks.fake_four(x, format, layout, scale_mode, rowwise))
