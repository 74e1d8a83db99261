"""`kernelforge.rmsnorm_quantize` and `kernelforge.add_rmsnorm_quantize`: fused RMSNorm + quantize."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernelforge.formats import DTYPE_BYTES
from kernelforge.ops import checks, fast_path, launch
from kernelforge.ops.torch_op import TorchOp, copy_into

_HALF = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


def rmsnorm_quantize(
    x: torch.Tensor,
    weight: torch.Tensor,
    format: str,
    *,
    eps: float = 1e-6,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `rmsnorm(x, weight)` in one pass over x (docs/numerics.md, "Fused RMSNorm + quantize").

    x is `[M, H]` or `[B, S, H]`, bfloat16 or float16, contiguous; weight is `[H]` of x's dtype.
    `format`, `layout`, `scale_mode`, `global_scale` and `out` mean what they mean for
    `kernelforge.quantize`, and so do the returned `(data, scale)`.
    """
    if torch.compiler.is_compiling():
        return copy_into(out, rmsnorm_quantize_op.custom(x, weight, format, eps, layout, scale_mode, global_scale))
    key = None  # the fast-path memo's key, also what a checked call into out= is remembered under
    if out is not None:  # same weight and buffers again, with an input like the last one
        try:
            d, s = out
            key = ("rmsnorm_quantize", x.shape, x.stride(), x.dtype, x.get_device(), format, eps, layout,
                   scale_mode, id(d), id(s), id(weight), id(global_scale))
            hit = fast_path.fast_hit(key, x)
            if hit is not None:
                hit.fn(x, None, weight, d, s, hit.arg, eps)
                return d, s
        except Exception:  # noqa: BLE001 - anything odd takes the checked path, which explains it
            pass
    return _run(x, None, weight, format, eps, layout, scale_mode, global_scale, out, key)


def add_rmsnorm_quantize(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    format: str,
    *,
    eps: float = 1e-6,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`h = dtype(x + residual)`; write h into `residual` in place; return quantized rmsnorm(h).

    `residual` has x's shape and dtype and must not overlap x, weight, global_scale or out.
    Everything else as in `rmsnorm_quantize`. On any argument error nothing is launched and
    residual is untouched.
    """
    if torch.compiler.is_compiling():
        return copy_into(out, add_rmsnorm_quantize_op.custom(x, residual, weight, format, eps, layout, scale_mode,
                                                             global_scale))
    if residual is None:
        raise TypeError("residual: expected a torch.Tensor, got None (use rmsnorm_quantize without a residual)")
    return _run(x, residual, weight, format, eps, layout, scale_mode, global_scale, out)


def _check_input(name: str, t: object, shape: Optional[torch.Size], dtype: Optional[torch.dtype],
                 device: Optional[torch.device]) -> int:
    """Check a contiguous 16-byte-aligned input tensor; return its data pointer."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {dtype} (the dtype of x), got {t.dtype}")
    if shape is not None and t.shape != shape:
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(t.shape)}")
    if device is not None:
        checks.check_device(name, t, device)
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (call .contiguous())")
    ptr = t.data_ptr()
    if ptr % 16:
        raise ValueError(f"{name}: expected a 16-byte aligned data pointer (a view at an odd offset?); "
                         "pass a fresh tensor or .clone()")
    return ptr


def _run(x, residual, weight, format, eps, layout, scale_mode, global_scale, out, fast_key=None):
    """Check every argument, then launch; a call into out= is remembered under `fast_key`
    (given by `rmsnorm_quantize` only) for its fast path."""
    fmt, mode, data_dtype, scale_dtype = checks.format_plan(format, layout, scale_mode)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    dtype = _HALF.get(x.dtype)
    if dtype is None:
        raise ValueError(f"x: expected dtype bfloat16 or float16, got {x.dtype}")
    shape = x.shape
    if len(shape) not in (2, 3):
        raise ValueError(f"x: expected a 2-D [M, H] or 3-D [B, S, H] tensor, got shape {list(shape)}")
    h = shape[-1]
    if h == 0 or h % fmt.block:
        raise ValueError(f"x: H = {h} (the last dimension) must be a positive multiple of the "
                         f"{fmt.name} block size B = {fmt.block}")
    if isinstance(eps, bool) or not isinstance(eps, (float, int)):
        raise TypeError(f"eps: expected a float, got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps: expected a finite float >= 0, got {eps!r}")
    device = x.device
    x_ptr = _check_input("x", x, None, None, None)
    _check_input("weight", weight, torch.Size((h,)), x.dtype, device)
    if residual is not None:
        _check_input("residual", residual, shape, x.dtype, device)
    if global_scale is not None:
        checks.check_global_scale(global_scale, fmt, device)
    inputs = (("x", x), ("weight", weight), ("global_scale", global_scale))
    checks.check_disjoint((("residual", residual),), inputs, " (it is overwritten with x + residual)")
    m = x.numel() // h
    d_shape, s_shape = checks.output_shapes(fmt, shape, m, layout)
    data, scale = checks.output_buffers(out, device, d_shape, s_shape, data_dtype, scale_dtype,
                                   (*inputs, ("residual", residual)))
    if m:
        coords = (("dtype", dtype), ("format", fmt.name), ("layout", layout),
                  ("residual", "none" if residual is None else "add"), ("scale_mode", mode))
        fn = launch.kernel_for("rmsnorm_quantize", coords, device.index, h, fmt.block, x_ptr,
                          h * DTYPE_BYTES[dtype], m)
        g_arg = checks.global_scale_arg(fmt, global_scale, device)
        flat = len(shape) == 2
        fn(x if flat else x.view(m, h), None if residual is None else residual.view(m, h), weight,
           data if flat else data.view(m, d_shape[-1]), scale, g_arg, float(eps))
        if fast_key is not None and flat and data is out[0] and scale is out[1]:
            fast_path.remember_fast(fast_key, fn, (data, scale, weight, global_scale), g_arg, x, (data, scale))
    return checks.results(out, data, scale)


def _rmsnorm_quantize_custom(x: torch.Tensor, weight: torch.Tensor, format: str, eps: float = 1e-6,
                             layout: str = "linear", scale_mode: str = "floor",
                             global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused RMSNorm + quantize (see `kernelforge.rmsnorm_quantize`)."""
    return _run(x, None, weight, format, eps, layout, scale_mode, global_scale, None)


def _add_rmsnorm_quantize_custom(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, format: str,
                                 eps: float = 1e-6, layout: str = "linear", scale_mode: str = "floor",
                                 global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused add + RMSNorm + quantize; `residual` is overwritten (see `kernelforge.add_rmsnorm_quantize`)."""
    return _run(x, residual, weight, format, eps, layout, scale_mode, global_scale, None)


rmsnorm_quantize_op = TorchOp(
    "kernelforge::rmsnorm_quantize", _rmsnorm_quantize_custom,
    schema='(Tensor x, Tensor weight, str format, float eps=1e-06, str layout="linear", str scale_mode="floor", '
           'Tensor? global_scale=None) -> (Tensor, Tensor)',
    fake=lambda x, weight, format, eps=1e-6, layout="linear", scale_mode="floor", global_scale=None:
    checks.fake_pair(x, format, layout, scale_mode))
add_rmsnorm_quantize_op = TorchOp(
    "kernelforge::add_rmsnorm_quantize", _add_rmsnorm_quantize_custom, mutates_args=("residual",),
    schema='(Tensor x, Tensor(a1!) residual, Tensor weight, str format, float eps=1e-06, str layout="linear", '
           'str scale_mode="floor", Tensor? global_scale=None) -> (Tensor, Tensor)',
    fake=lambda x, residual, weight, format, eps=1e-6, layout="linear", scale_mode="floor", global_scale=None:
    checks.fake_pair(x, format, layout, scale_mode))
