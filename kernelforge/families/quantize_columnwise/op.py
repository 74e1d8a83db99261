"""Columnwise and dual quantization, NVFP4 with the random Hadamard transform: validate,
allocate, dispatch to the `quantize_columnwise` kernels (one launch reads x once)."""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from kernelforge.errors import KernelNotBuilt
from kernelforge.families.scale_layout import op as scale_layout
from kernelforge.formats import DTYPE_BYTES, Format
from kernelforge.limits import MAX_M_TILES, RHT_SIGN_MASK, RHT_SIZE, TILE_M
from kernelforge.ops import checks, fast_path, launch


def check_input(x: object, dtypes: tuple[torch.dtype, ...] = tuple(checks.DTYPES)) -> str:
    """Type, dtype and dimension checks of x; return the dtype's name."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"x: expected dtype {names}, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x: columnwise quantization needs at least 2 dimensions ([M, K]), got {list(x.shape)}")
    return checks.DTYPES[x.dtype]


def format_and_input(x: object, format: object, layout: object, scale_mode: object):
    """`checks.format_plan` plus the input checks: (format, effective mode, data dtype, scale dtype)."""
    plan = checks.format_plan(format, layout, scale_mode)
    check_input(x)
    return plan


def repeat(hit: fast_path.FastCall, x: torch.Tensor, out: tuple) -> bool:
    """Repeat a remembered, fully validated call (`fast_path.fast_hit`'s hit) into the same buffers;
    False when the kernel refuses it (e.g. a misaligned x: the checked path then explains it)."""
    g_row, g_col, rowwise, sign_mask = hit.arg
    try:
        if rowwise:
            hit.fn(x, out[0], out[1], out[2], out[3], g_row, g_col, sign_mask)
        else:
            hit.fn(x, None, None, out[0], out[1], g_row, g_col, sign_mask)
    except Exception:  # noqa: BLE001
        return False
    return True


def run(x: torch.Tensor, fmt: Format, mode: str, layout: str, data_dtype: torch.dtype, scale_dtype: torch.dtype,
        rowwise: bool, g_row: Optional[torch.Tensor], g_col: Optional[torch.Tensor], out: Any,
        transform: str = "none", sign_mask: int = RHT_SIGN_MASK,
        key: Optional[tuple] = None) -> tuple[torch.Tensor, ...]:
    """Columnwise (and with `rowwise`, also rowwise) quantization of x, leading dims flattened to M.

    Returns (data_t, scale_t), or (data, scale, data_t, scale_t) with `rowwise`; `out` is the
    caller's tuple of the same length, or None. With `key` (from `fast_key`) a call into the
    caller's own 2-D buffers is remembered for the out= fast path.
    """
    dtype = checks.DTYPES[x.dtype]
    shape = x.shape
    k = shape[-1]
    b = fmt.block
    device = x.device
    if rowwise and k % b:
        raise ValueError(f"x: K = {k} (the last dimension) must be a multiple of the {fmt.name} block size B = {b}")
    x2 = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), k)  # -1 fails when K = 0
    m = x2.shape[0]
    if m % b:
        raise ValueError(f"x: M = {m} (the flattened leading dimensions) must be a multiple of the {fmt.name} "
                         f"block size B = {b} for columnwise quantization")
    if k and x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    if -(-m // 128) * 128 // TILE_M > MAX_M_TILES:  # the swizzled layout pads M to 128
        raise ValueError(f"x: M = {m} rows is too many for columnwise quantization (at most "
                         f"{(MAX_M_TILES * TILE_M) // 128 * 128})")
    scale_args = (("global_scale_row" if transform == "rht" else "global_scale", g_row), ("global_scale_col", g_col))
    for name, g in scale_args:
        if g is not None:
            checks.check_global_scale(g, fmt, device, name=name)
    n_out = 4 if rowwise else 2
    if out is not None and not (isinstance(out, (tuple, list)) and len(out) == n_out):
        what = "(data, scale, data_t, scale_t)" if rowwise else "(data_t, scale_t)"
        raise TypeError(f"out: expected a {what} tuple of tensors, got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    first = 2 if rowwise else 0
    specs = [(*checks.output_shapes(fmt, (k, m), k, layout), (f"out[{first}] (data_t)", f"out[{first + 1}] (scale_t)"))]
    if rowwise:
        specs.insert(0, (*checks.output_shapes(fmt, shape, m, layout), checks.PAIR_SLOTS))
    given = [None] * len(specs) if out is None else [out[i:i + 2] for i in range(0, n_out, 2)]
    outs = checks.output_pairs(given, device, specs, data_dtype, scale_dtype, (("x", x), *scale_args))
    if m and k:
        es = DTYPE_BYTES[dtype]
        stride_bytes = x2.stride(0) * es if m > 1 else k * es
        linear = tuple(outs[1::2])  # (scale, scale_t) or (scale_t,)
        where = (device.index, k, b, x2.data_ptr(), stride_bytes, m)
        fn = None
        if layout == "linear" and scale_layout.staged(fmt, m, k, rowwise, transform, linear):
            try:  # a cache without the swizzled build or the pass serves the call with the direct kernel
                fn = scale_layout.staged_call(launch.kernel_for("quantize_columnwise", dispatch_coords(
                    dtype, fmt, "swizzled", rowwise, mode, transform), *where), scale_layout.pass_kernel(linear[0]),
                    linear)
            except KernelNotBuilt:
                fn = None
        if fn is None:
            fn = launch.kernel_for("quantize_columnwise", dispatch_coords(dtype, fmt, layout, rowwise, mode, transform),
                                   *where)
        scales = (g_row, g_col)
        g_row = checks.global_scale_arg(fmt, g_row, device)
        g_col = checks.global_scale_arg(fmt, g_col, device) if transform == "rht" else g_row
        data = outs[0] if not rowwise or len(shape) == 2 else outs[0].view(m, outs[0].shape[-1])
        fn(x2, data if rowwise else None, outs[1] if rowwise else None, outs[-2], outs[-1], g_row, g_col, sign_mask)
        if key is not None and x2 is x and all(o is t for o, t in zip(outs, out)):
            fast_path.remember_fast(key, fn, (*outs, *scales[:2 if transform == "rht" else 1]),
                            (g_row, g_col, rowwise, sign_mask), x, outs)
    else:
        for s in outs[1::2]:
            if s.numel():
                s.view(torch.uint8).zero_()  # nothing to quantize: (padding) scales are zero
    return tuple(outs) if out is None else tuple(out)


def dispatch_coords(dtype: str, fmt: Format, layout: str, rowwise: bool, mode: str, transform: str) -> tuple:
    """The `quantize_columnwise` dispatch coordinates of a call (sorted by axis)."""
    outputs = "dual" if rowwise else "columnwise"
    return (("dtype", dtype), ("format", fmt.name), ("layout", layout), ("outputs", outputs), ("scale_mode", mode),
            ("transform", transform))


def check_rht_input(x: object, sign_mask: object) -> None:
    """The Hadamard transform's input checks: x a bfloat16 [M, N] tensor with M and N multiples
    of 16, sign_mask a 16-bit integer."""
    check_input(x, (torch.bfloat16,))
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D [M, N] tensor, got shape {list(x.shape)}")
    if isinstance(sign_mask, bool) or not isinstance(sign_mask, int) or not 0 <= sign_mask <= 0xFFFF:
        raise ValueError(f"sign_mask: expected an integer in 0..0xFFFF (16 row signs), got {sign_mask!r}")
    m, n = x.shape
    if m % RHT_SIZE or n % RHT_SIZE:
        raise ValueError(f"x: M = {m} and N = {n} must both be multiples of {RHT_SIZE} for the Hadamard transform")


def hadamard_columns(x: torch.Tensor, sign_mask: int = RHT_SIGN_MASK) -> torch.Tensor:
    """The transformed transpose `bf16(rht(x))` [N, M] of x [M, N] with torch ops on x's device
    (fp32 butterflies, no sync): what the kernel computes, unfused."""
    m, n = x.shape
    i = torch.arange(RHT_SIZE, device=x.device)
    signs = 1.0 - 2.0 * ((sign_mask >> i) & 1).to(torch.float32)
    v = x.t().float().reshape(n, m // RHT_SIZE, RHT_SIZE) * signs
    h = 1
    while h < RHT_SIZE:
        v = v.reshape(n, m // RHT_SIZE, RHT_SIZE // (2 * h), 2, h)
        a, b = v[..., 0, :], v[..., 1, :]
        v = torch.stack((a + b, a - b), dim=-2)
        h *= 2
    return (v.reshape(n, m) * 0.25).to(torch.bfloat16)
