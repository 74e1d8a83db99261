"""`kernelforge.quantize_experts` and `kernelforge.quantize_grouped`: grouped (mixture-of-experts)
rowwise quantization, every group in one launch; validate, allocate, dispatch."""
from __future__ import annotations

from typing import Optional

import torch

from kernelforge.formats import DTYPE_BYTES, SWIZZLE_COLS, SWIZZLE_ROWS, Format, round_up
from kernelforge.limits import MAX_BLOCKS, MAX_GROUPS
from kernelforge.ops import checks, fast_path, launch
from kernelforge.ops.torch_op import TorchOp, copy_into

# Scale bytes per call: the kernels index them with 32-bit integers that run up to one grid
# stride past the last one.
MAX_SCALE_BYTES = MAX_BLOCKS - (1 << 20)
OP = "quantize_grouped"


def experts_shapes(fmt: Format, e: int, n: int, k: int, layout: str) -> tuple[tuple, tuple]:
    """(data shape, scale shape) of quantize_experts for w [e, n, k]: per-expert scale slabs."""
    kb = k // fmt.block
    if layout == "linear":
        s_shape = (e, n, kb)
    else:
        s_shape = (e, round_up(n, SWIZZLE_ROWS), round_up(kb, SWIZZLE_COLS))
    if s_shape[0] * s_shape[1] * s_shape[2] > MAX_SCALE_BYTES:
        raise ValueError(f"w: {e} x {n} x {k} needs {s_shape[0] * s_shape[1] * s_shape[2]} scale bytes; "
                         f"at most {MAX_SCALE_BYTES} are supported per call")
    return (e, n, k * fmt.element_bits // 8), s_shape


def grouped_rows(t: int, groups: int) -> int:
    """Scale rows of quantize_grouped: `128 * floor((T + 127*G) / 128)`, a bound (known without
    reading the offsets) of the sum over the groups of their sizes rounded up to 128."""
    return (t + (SWIZZLE_ROWS - 1) * groups) // SWIZZLE_ROWS * SWIZZLE_ROWS


def grouped_shapes(fmt: Format, t: int, k: int, groups: int) -> tuple[tuple, tuple]:
    """(data shape, scale shape) of quantize_grouped for x [t, k] split into `groups` groups."""
    s_shape = (grouped_rows(t, groups), round_up(k // fmt.block, SWIZZLE_COLS))
    if s_shape[0] * s_shape[1] > MAX_SCALE_BYTES:
        raise ValueError(f"x: {t} x {k} in {groups} groups needs {s_shape[0] * s_shape[1]} scale bytes; "
                         f"at most {MAX_SCALE_BYTES} are supported per call")
    return (t, k * fmt.element_bits // 8), s_shape


def quantize_experts(
    w: torch.Tensor,
    format: str,
    *,
    layout: str = "swizzled",
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise block-scaled quantization of every expert of a weight stack `w [E, N, K]` in one launch.

    Returns `(data, scale)`: data `[E, N, K*bits/8]` (float8_e4m3fn for MXFP8, float4_e2m1fn_x2
    for MXFP4/NVFP4), expert e's bytes equal to `quantize(w[e])`; scale per expert, `[E, N, K/B]`
    (linear) or `[E, roundup(N,128), roundup(K/B,4)]` (swizzled: each expert's slab is the 128x4
    layout of an [N, K] matrix, padding zero). w is bfloat16, float16 or float32, contiguous, on
    CUDA. `global_scale` (NVFP4): None (1.0), a float32 tensor [1] for every expert or [E], one
    per expert (values as for `kernelforge.quantize`: read on the device, not checked). `format`,
    `scale_mode` and `out=(data, scale)` (overlapping neither w nor global_scale) as for
    `kernelforge.quantize`.
    Every argument is checked before anything is launched. Under torch.compile this is the
    `kernelforge::quantize_experts` op.
    """
    if torch.compiler.is_compiling():
        return copy_into(out, quantize_experts_op.custom(w, format, layout, scale_mode, global_scale))
    fmt, mode, data_dtype, scale_dtype = checks.format_plan(format, layout, scale_mode)
    dtype = _check_input("w", w, "[E, N, K]", fmt)
    e, n, k = w.shape
    if not w.is_contiguous():
        raise ValueError("w: expected a contiguous tensor (call .contiguous())")
    device = w.device
    if global_scale is not None:
        checks.check_global_scale(global_scale, fmt, device, e, "expert", "w")
    d_shape, s_shape = experts_shapes(fmt, e, n, k, layout)
    data, scale = checks.output_buffers(out, device, d_shape, s_shape, data_dtype, scale_dtype,
                                   (("w", w), ("global_scale", global_scale)), "w")
    if e and n and k:  # otherwise there is no byte to write, padding included
        fn = launch.kernel_for(OP, _coords(dtype, fmt, "experts", layout, mode), device.index, k, fmt.block,
                          w.data_ptr(), k * DTYPE_BYTES[dtype], e * n)
        fn(w, None, data, scale, None, checks.global_scale_arg(fmt, global_scale, device))
    return checks.results(out, data, scale)


def quantize_grouped(
    x: torch.Tensor,
    group_offsets: torch.Tensor,
    format: str,
    *,
    scale_mode: str = "floor",
    global_scale: Optional[torch.Tensor] = None,
    out: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
    check_offsets: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rowwise block-scaled quantization of the row groups of `x [T, K]` in one launch, with
    swizzled scales laid out per group (what grouped block-scaled GEMMs read).

    `group_offsets` is an int32 tensor `[G]` (1 <= G <= MAX_GROUPS) on x's device of cumulative
    group ends: group g is rows `[group_offsets[g-1], group_offsets[g])` (0 before the first), so
    the values are non-decreasing, >= 0, and the last is T; groups may be empty.

    Returns `(data, scale, scale_offsets)`. data `[T, K*bits/8]` equals `quantize(x)`'s. scale is
    `[R, roundup(K/B,4)]` with `R = 128 * floor((T + 127*G) / 128)`: group g's rows hold the 128x4
    swizzled layout of that group's scales starting at row `scale_offsets[g]` (a multiple of 128,
    the sum of the earlier groups' sizes each rounded up to 128); every other row is zero.
    scale_offsets is int32 `[G]`, written by the same kernel. NVFP4 `global_scale`: None (1.0),
    float32 `[1]`, or `[G]` (one per group). `out=(data, scale, scale_offsets)` writes into caller
    buffers of exactly those shapes and dtypes (uint8 accepted for data and scale) that overlap
    neither each other nor x, group_offsets or global_scale.

    The values of group_offsets are read on the device only: the call never synchronizes (an
    MoE layer must not). Invalid values give a defined result: the kernel uses the group ends
    `end[g] = clamp(max(group_offsets[0..g]), 0, T)` (the identity for valid offsets), so it
    never reads or writes out of bounds; scale_offsets and scale are those of these groups, and
    the data rows after the last clamped end are left unwritten. `group_offsets_valid` gives a
    deferred check (a device bool, no sync); `check_offsets=True` checks the values with a host
    read first and raises ValueError naming the first bad one (a sync: for debugging; skipped
    while a CUDA graph is being captured on their device). Under torch.compile this is the
    `kernelforge::quantize_grouped` op (offsets unchecked).
    """
    if torch.compiler.is_compiling():
        return copy_into(out, quantize_grouped_op.custom(x, group_offsets, format, scale_mode, global_scale))
    key = None  # the out= fast path's key (fast_path.remember_fast): the same buffers, an x like the last one
    if out is not None and check_offsets is False:
        try:
            d, s, so = out
            key = ("quantize_grouped", x.shape, x.stride(), x.dtype, x.get_device(), format, scale_mode,
                   group_offsets.shape, id(d), id(s), id(so), id(global_scale))
            hit = fast_path.fast_hit(key, x)
            # group_offsets is keyed by shape only (an MoE router makes new ones every step): its
            # other properties are checked here, as the checked path does.
            if hit is not None and _offsets_fit(group_offsets, key[4], hit.out_spans):
                hit.fn(x, group_offsets, d, s, so, hit.arg)
                return d, s, so
        except Exception:  # noqa: BLE001 - anything odd takes the checked path, which explains it
            pass
    fmt, mode, data_dtype, scale_dtype = checks.format_plan(format, "swizzled", scale_mode)
    dtype = _check_input("x", x, "[T, K]", fmt)
    t, k = x.shape
    if k == 0:
        raise ValueError(f"x: K = 0 (the last dimension) must be a positive multiple of the {fmt.name} "
                         f"block size B = {fmt.block}")
    if x.stride(1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(1)}")
    device = x.device
    groups = _check_offsets(group_offsets, device)
    if global_scale is not None:
        checks.check_global_scale(global_scale, fmt, device, groups, "group")
    d_shape, s_shape = grouped_shapes(fmt, t, k, groups)
    offsets_out = None
    if out is not None:
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            raise TypeError(f"out: expected a (data, scale, scale_offsets) tuple of tensors, got {type(out).__name__}")
        offsets_out = checks._check_buffer("out[2] (scale_offsets)", out[2], (groups,), torch.int32, 4, device,
                                      raw_bytes=False)
    inputs = (("x", x), ("group_offsets", group_offsets), ("global_scale", global_scale))
    checks.check_disjoint((("out[2] (scale_offsets)", offsets_out),), inputs)
    if device.type == "cuda":
        checks.check_launch_device(device)  # before the host read of the offsets below
    if check_offsets is not False:
        if check_offsets is not True:
            raise TypeError(f"check_offsets: expected a bool, got {type(check_offsets).__name__}")
        _check_offset_values(group_offsets, t)
    data, scale = checks.output_buffers(None if out is None else out[:2], device, d_shape, s_shape, data_dtype,
                                   scale_dtype, (*inputs, ("out[2] (scale_offsets)", offsets_out)))
    if offsets_out is None:
        offsets_out = torch.empty(groups, dtype=torch.int32, device=device)
    es = DTYPE_BYTES[dtype]
    fn = launch.kernel_for(OP, _coords(dtype, fmt, "offsets", "swizzled", mode), device.index, k, fmt.block,
                      x.data_ptr(), x.stride(0) * es if t > 1 else k * es, t)
    g_arg = checks.global_scale_arg(fmt, global_scale, device)
    fn(x, group_offsets, data, scale, offsets_out, g_arg)
    if out is None:
        return data, scale, offsets_out
    if key is not None and data is out[0] and scale is out[1]:
        fast_path.remember_fast(key, fn, (data, scale, offsets_out, global_scale), g_arg, x,
                                (data, scale, offsets_out))
    return out[0], out[1], out[2]


def _offsets_fit(offsets: torch.Tensor, device: int, out_spans: tuple) -> bool:
    """Whether group_offsets (of the remembered shape) passes `_check_offsets` on `device` and
    overlaps none of the out buffers, as the checked path requires. It runs on every fast-path
    call, so it is written for host time: one contiguity test covers the rule "contiguous when
    G > 1", and the spans are walked by a plain loop, which sets up no generator
    (`benchmarks/diag.py launch-cost` times the whole call)."""
    if offsets.dtype is not torch.int32 or offsets.get_device() != device or not offsets.is_contiguous():
        return False
    lo = offsets.data_ptr()
    hi = lo + offsets.nbytes  # checks.byte_span of a contiguous int32 [G], without its generic walk
    for a, b in out_spans:
        if lo < b and a < hi:
            return False
    return True


def _coords(dtype: str, fmt: Format, grouping: str, layout: str, mode: str) -> tuple[tuple[str, str], ...]:
    """The dispatch coordinates, sorted by axis (what `kernel_for` takes)."""
    return (("dtype", dtype), ("format", fmt.name), ("grouping", grouping), ("layout", layout),
            ("scale_mode", mode))


def _check_input(name: str, t: object, dims: str, fmt: Format) -> str:
    """Check the input tensor's type, dtype, rank and K; return its dtype name."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    dtype = checks.DTYPES.get(t.dtype)
    if dtype is None:
        raise ValueError(f"{name}: expected dtype bfloat16, float16 or float32, got {t.dtype}")
    rank = dims.count(",") + 1
    if t.dim() != rank:
        raise ValueError(f"{name}: expected a {rank}-D tensor {dims}, got shape {list(t.shape)}")
    k = t.shape[-1]
    if k % fmt.block:
        raise ValueError(f"{name}: K = {k} (the last dimension) must be a multiple of the {fmt.name} "
                         f"block size B = {fmt.block}")
    return dtype


def _check_offsets(offsets: object, device: torch.device) -> int:
    """Check group_offsets' type, dtype, shape, layout and device; return the group count G."""
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"group_offsets: expected a 1-D int32 tensor [G] of cumulative group ends, "
                        f"got {type(offsets).__name__}")
    if offsets.dtype != torch.int32:
        raise ValueError(f"group_offsets: expected dtype torch.int32, got {offsets.dtype}")
    if offsets.dim() != 1:
        raise ValueError(f"group_offsets: expected a 1-D tensor [G], got shape {list(offsets.shape)}")
    groups = offsets.shape[0]
    if not 1 <= groups <= MAX_GROUPS:
        raise ValueError(f"group_offsets: expected 1 to {MAX_GROUPS} groups, got G = {groups}")
    if groups > 1 and offsets.stride(0) != 1:
        raise ValueError("group_offsets: expected a contiguous tensor")
    checks.check_device("group_offsets", offsets, device)
    return groups


def _check_offset_values(offsets: torch.Tensor, t: int) -> None:
    """Check that group_offsets are non-decreasing, >= 0 and end at T (a host read), unless a
    CUDA graph is being captured on the current stream of their device (a read there would
    break the capture; that device need not be the current one)."""
    if offsets.device.type == "cuda" and checks.stream_capturing(offsets.device.index):
        return
    prev = 0
    for g, end in enumerate(offsets.tolist()):
        if end < prev:
            what = "must be >= 0" if g == 0 else f"is less than group_offsets[{g - 1}] = {prev}"
            raise ValueError(f"group_offsets: expected non-decreasing cumulative group ends; "
                             f"group_offsets[{g}] = {end} {what}")
        prev = end
    if prev != t:
        raise ValueError(f"group_offsets: the last value must be T = {t} (the rows of x), got {prev}")


def group_offsets_valid(group_offsets: torch.Tensor, t: int) -> torch.Tensor:
    """Whether `group_offsets` are valid cumulative group ends for T = `t` rows (non-decreasing,
    >= 0, the last equal to T), as a bool tensor [] on their device, computed there without a
    host sync: the deferred form of `quantize_grouped(..., check_offsets=True)`. Read it (e.g.
    `assert ok`) where a sync is acceptable, or fold it into a flag checked later."""
    if not isinstance(group_offsets, torch.Tensor) or group_offsets.dim() != 1 or group_offsets.numel() == 0:
        raise ValueError("group_offsets: expected a non-empty 1-D tensor [G] of cumulative group ends")
    if group_offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"group_offsets: expected an int32 (or int64) tensor of cumulative group ends, "
                         f"got {group_offsets.dtype}")
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f"t: expected the number of rows of x (an int >= 0), got {t!r}")
    o = group_offsets
    ok = (o[0] >= 0) & (o[-1] == t)
    if o.numel() > 1:
        ok = ok & (o[1:] >= o[:-1]).all()
    return ok


def _quantize_experts_custom(w: torch.Tensor, format: str, layout: str = "swizzled", scale_mode: str = "floor",
                             global_scale: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert rowwise quantization of a weight stack (see `kernelforge.quantize_experts`)."""
    return quantize_experts(w, format, layout=layout, scale_mode=scale_mode, global_scale=global_scale)


def _fake_experts(w, format, layout="swizzled", scale_mode="floor", global_scale=None):
    fmt, _, data_dtype, scale_dtype = checks.format_plan(format, layout, scale_mode)
    d_shape, s_shape = experts_shapes(fmt, *w.shape, layout)
    return w.new_empty(d_shape, dtype=data_dtype), w.new_empty(s_shape, dtype=scale_dtype)


def _quantize_grouped_custom(x: torch.Tensor, group_offsets: torch.Tensor, format: str, scale_mode: str = "floor",
                             global_scale: Optional[torch.Tensor] = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rowwise quantization of row groups with per-group swizzled scales (see `kernelforge.quantize_grouped`)."""
    return quantize_grouped(x, group_offsets, format, scale_mode=scale_mode, global_scale=global_scale)


def _fake_grouped(x, group_offsets, format, scale_mode="floor", global_scale=None):
    fmt, _, data_dtype, scale_dtype = checks.format_plan(format, "swizzled", scale_mode)
    groups = group_offsets.shape[0]
    d_shape, s_shape = grouped_shapes(fmt, x.shape[0], x.shape[1], groups)
    return (x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype),
            group_offsets.new_empty((groups,), dtype=torch.int32))


quantize_experts_op = TorchOp("kernelforge::quantize_experts", _quantize_experts_custom, fake=_fake_experts,
                              schema='(Tensor w, str format, str layout="swizzled", str scale_mode="floor", '
                                     'Tensor? global_scale=None) -> (Tensor, Tensor)')
quantize_grouped_op = TorchOp("kernelforge::quantize_grouped", _quantize_grouped_custom, fake=_fake_grouped,
                              schema='(Tensor x, Tensor group_offsets, str format, str scale_mode="floor", '
                                     'Tensor? global_scale=None) -> (Tensor, Tensor, Tensor)')
