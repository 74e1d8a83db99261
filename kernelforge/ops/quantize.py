"""`kernelforge.quantize` and `kernelforge.nvfp4_global_scale`: validate, allocate, dispatch."""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import FORMATS, LAYOUTS, SWIZZLE_COLS, SWIZZLE_ROWS, Format
from ._common import check_out, device_capability, dispatch_table

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_PLANS = {name: (f, getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)) for name, f in FORMATS.items()}
_MAX_BLOCKS = 2**31 - 1  # the kernels index scale blocks with 32-bit integers
_ones: dict[torch.device, torch.Tensor] = {}
_fn_cache: dict[tuple, object] = {}


def _unit_global_scale(device: torch.device) -> torch.Tensor:
    g = _ones.get(device)
    if g is None:
        g = _ones[device] = torch.ones(1, dtype=torch.float32, device=device)
    return g


def _check_global_scale(g: object, fmt: Format, x: torch.Tensor) -> None:
    if not fmt.has_global_scale:
        raise ValueError(f"global_scale: only NVFP4 takes a global scale; {fmt.name} must be called with None")
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"global_scale: expected a float32 CUDA tensor of shape [1] or None, got {type(g).__name__}")
    if g.dtype != torch.float32:
        raise ValueError(f"global_scale: expected dtype torch.float32, got {g.dtype}")
    if g.dim() != 1 or g.numel() != 1:  # a 0-d tensor is not [1]: the kernel checks ndim == 1
        raise ValueError(f"global_scale: expected shape [1], got {list(g.shape)}")
    if g.device != x.device:
        raise ValueError(f"global_scale: expected a tensor on {x.device} (the device of x), got {g.device}")


def quantize(
    x: torch.Tensor,
    format: str,
    *,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise block-scaled quantization of `x` along its last dimension (NUMERICS.md).

    Returns `(data, scale)`. `data` keeps the leading dimensions of x: `[..., K]` float8_e4m3fn
    for MXFP8, `[..., K/2]` float4_e2m1fn_x2 for MXFP4/NVFP4. `scale` is 2-D with the leading
    dimensions flattened to M: `[M, K/B]` (linear) or `[roundup(M,128), roundup(K/B,4)]`
    (swizzled, padding zero); float8_e8m0fnu for MX formats, float8_e4m3fn for NVFP4.
    `scale_mode` ("floor" or "rceil") applies to MX formats. `global_scale` is NVFP4's fp32
    encode scale on the device (None means 1.0). `out=(data, scale)` writes into caller buffers
    of exactly those shapes and dtypes (uint8 is accepted as well). Every argument is checked
    before anything is launched.
    """
    # This is the hot path: every torch attribute access costs ~0.3-1 us, so each is done once.
    plan = _PLANS.get(format) if isinstance(format, str) else None
    if plan is None:
        raise ValueError(f"format: expected one of {sorted(FORMATS)}, got {format!r}")
    fmt, data_dtype, scale_dtype = plan
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    dtype = _DTYPES.get(x.dtype)
    if dtype is None:
        raise ValueError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    shape = x.shape
    if not shape:
        raise ValueError("x: expected at least one dimension (the K dimension)")
    k = shape[-1]
    if k % fmt.block:
        raise ValueError(f"x: K = {k} (the last dimension) must be a multiple of the {fmt.name} block size B = {fmt.block}")
    if layout != "linear" and layout != "swizzled":
        raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {layout!r}")
    if fmt.has_global_scale:
        if scale_mode != "floor" and scale_mode != "none":  # "floor" is the default: "not given" here
            raise ValueError(f"scale_mode: {fmt.name} has E4M3 block scales and no scale mode "
                             f"(pass 'none' or leave the default); got {scale_mode!r}")
        mode = "none"
    else:
        if scale_mode not in fmt.scale_modes:
            raise ValueError(f"scale_mode: expected one of {list(fmt.scale_modes)} for {fmt.name}, got {scale_mode!r}")
        mode = scale_mode
    if global_scale is not None:
        _check_global_scale(global_scale, fmt, x)
    if k and x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")

    x2 = x if len(shape) == 2 else x.reshape(-1, k)
    m = x2.shape[0]
    kb = k // fmt.block
    if m * kb > _MAX_BLOCKS:
        raise ValueError(f"x: {m} x {k} holds {m * kb} scale blocks; at most {_MAX_BLOCKS} are supported per call")
    kq = k * fmt.element_bits // 8
    if layout == "linear":
        s_shape = (m, kb)
    else:
        s_shape = ((m + SWIZZLE_ROWS - 1) // SWIZZLE_ROWS * SWIZZLE_ROWS,
                   (kb + SWIZZLE_COLS - 1) // SWIZZLE_COLS * SWIZZLE_COLS)
    d_shape = (*shape[:-1], kq)
    device = x.device
    if out is not None:
        data, scale = check_out(out, device, d_shape, s_shape, data_dtype, scale_dtype)
    # Checked last so that every other argument error is reported (and testable) without a GPU.
    if device.type != "cuda":
        raise ValueError(f"x: expected a CUDA tensor, got a tensor on {device}")
    if out is None:
        data = torch.empty(d_shape, dtype=torch.uint8, device=device)
        scale = torch.empty(s_shape, dtype=torch.uint8, device=device)
    if m and kb:
        fn = _resolve(fmt.name, mode, layout, dtype, x2, k, kb, device.index)
        if fmt.has_global_scale:
            g = global_scale if global_scale is not None else _unit_global_scale(device)
        else:
            g = None  # MX modules keep the (compile-time None) global-scale slot in their signature
        fn(x2, data if len(d_shape) == 2 else data.view(m, kq), scale.view(-1), g)
    elif s_shape[0] * s_shape[1]:
        scale.zero_()  # K = 0 with padded rows: nothing to quantize, padding is still zero
    if out is None:
        return data.view(data_dtype), scale.view(scale_dtype)
    return out[0], out[1]


def _resolve(fmt: str, mode: str, layout: str, dtype: str, x2: torch.Tensor, k: int, kb: int, dev: int):
    ptr = x2.data_ptr()
    es = _ELEMENT_BYTES[dtype]
    stride_bytes = x2.stride(0) * es if x2.shape[0] > 1 else k * es
    align = ptr & -ptr if ptr else 1 << 30
    table = dispatch_table()
    # Which K-class accepts the input depends only on these residues (vector_bytes <= 16 and
    # table.kmod is the lcm of every k_multiple_blocks), so memoizing on them is exact.
    memo = (fmt, mode, layout, dtype, dev, kb % table.kmod, min(align, 16), stride_bytes % 16, table)
    fn = _fn_cache.get(memo)
    if fn is None:
        coords = {"format": fmt, "scale_mode": mode, "layout": layout, "dtype": dtype}
        fn, _ = table.resolve("quantize", coords, device_capability(dev), kb, align, stride_bytes)
        _fn_cache[memo] = fn
    return fn


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """NVFP4 calibration: `448 * 6 / amax(|x|)` as a float32 tensor of shape [1] on x's device.

    amax == 0 gives 1.0. Computed on the device without a host sync (CUDA-graph safe).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise ValueError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    amax = x.detach().abs().amax().float().reshape(1) if x.numel() else torch.zeros(1, device=x.device)
    g = torch.full_like(amax, 448.0 * 6.0) / amax
    return torch.where(amax == 0, torch.ones_like(g), g)
