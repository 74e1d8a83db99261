"""Argument checks, output shapes and buffers, and fake (meta) results of the quantizing ops
(public through `kernelforge.extend`).

Everything here sits on the per-call hot path: each torch attribute access costs about a
microsecond, so helpers take what the caller already read instead of reading it again.
"""

from typing import Any, Callable, Optional, Sequence

import torch

from ..formats import FORMATS, LAYOUTS, SWIZZLE_COLS, SWIZZLE_ROWS, Format
from ..limits import MAX_BLOCKS
from .unit_scale import unit_scale

DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


PLANS = {name: (f, getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)) for name, f in FORMATS.items()}


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """The [start, end) byte addresses spanned by t's elements (start == end when t is empty)."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))  # torch strides are never negative
    return start, start + (last + 1) * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory ranges of two tensors intersect (empty tensors overlap nothing).

    Ranges, not elements: a buffer placed in the gaps of a strided tensor counts as overlapping."""
    a0, a1 = byte_span(a)
    b0, b1 = byte_span(b)
    return a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1


Named = Sequence[tuple[str, Optional[torch.Tensor]]]


def check_disjoint(written: Named, others: Named, why: str = "") -> None:
    """Raise ValueError naming the first tensor of `written` (name, tensor) that overlaps a
    tensor of `others` or an earlier one of `written`; None entries are skipped."""
    seen = [(n, t) for n, t in others if t is not None]
    for name, t in written:
        if t is None:
            continue
        for other, u in seen:
            if overlaps(t, u):
                raise ValueError(f"{name}: must not overlap {other}{why}")
        seen.append((name, t))


# The calling thread's current CUDA device: torch._C._cuda_getDevice is what
# torch.cuda.current_device() returns after its lazy-init check, which it skips on every call; an
# op only asks once it holds a CUDA tensor, so CUDA is initialized. Not cached: it is per thread
# and changes under torch.cuda.device / set_device / torch.cuda.stream.
current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", lambda: -1)


def check_device(name: str, t: torch.Tensor, device: torch.device, arg: str = "x") -> None:
    """Raise ValueError unless tensor t (the argument `name`) is on `device`, the device of the
    input named `arg`."""
    if t.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of {arg}), got {t.device}")


def check_same_device(named: Named, device: torch.device, arg: str = "x") -> None:
    """`check_device` for each (name, tensor) pair; None entries are skipped."""
    for name, t in named:
        if t is not None:
            check_device(name, t, device, arg)


def check_launch_device(device: torch.device, arg: str = "x") -> None:
    """Refuse a launch on `device` that a CUDA graph capture would silently miss.

    The kernel runs on the current stream of `device`, the device of the input named `arg`
    (see above). Where that is not the current device and the current device's current stream
    is being captured, the launch would run once, eagerly, outside the graph (replays would
    skip it): a RuntimeError says so instead, unless `device`'s own current stream is being
    captured as well (then the launch is recorded there). Nothing to check on the current
    device: one integer compare. Called by every op before its outputs are allocated."""
    index = device.index
    if index is None or index == current_device():
        return
    if torch.cuda.is_current_stream_capturing() and not stream_capturing(index):
        raise RuntimeError(
            f"{arg}: is on {device}, but a CUDA graph is being captured on the current stream of "
            f"cuda:{current_device()} (the current device): the kernel would run on {device}'s current "
            f"stream, outside the capture. Capture on a stream of {device} "
            f"(torch.cuda.graph(g, stream=torch.cuda.Stream(device={index}))) or call the op on "
            f"cuda:{current_device()}'s tensors")


def stream_capturing(index: int) -> bool:
    """Whether a CUDA graph capture is under way on the current stream of cuda:`index`."""
    if index == current_device():
        return torch.cuda.is_current_stream_capturing()
    with torch.cuda.device(index):
        return torch.cuda.is_current_stream_capturing()


def format_plan(format: object, layout: object, scale_mode: object) -> tuple[Format, str, torch.dtype, torch.dtype]:
    """Check format, layout and scale_mode; return (format, effective mode, data dtype, scale dtype)."""
    plan = PLANS.get(format) if isinstance(format, str) else None
    if plan is None:
        raise ValueError(f"format: expected one of {sorted(FORMATS)}, got {format!r}")
    fmt, data_dtype, scale_dtype = plan
    if layout != "linear" and layout != "swizzled":
        raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {layout!r}")
    if fmt.has_global_scale:
        if scale_mode != "floor" and scale_mode != "none":  # "floor" is the default: "not given" here
            raise ValueError(f"scale_mode: {fmt.name} has E4M3 block scales and no scale mode "
                             f"(pass 'none' or leave the default); got {scale_mode!r}")
        return fmt, "none", data_dtype, scale_dtype
    if scale_mode not in fmt.scale_modes:
        raise ValueError(f"scale_mode: expected one of {list(fmt.scale_modes)} for {fmt.name}, got {scale_mode!r}")
    return fmt, scale_mode, data_dtype, scale_dtype  # type: ignore[return-value]


def output_shapes(fmt: Format, shape: tuple[int, ...], m: int, layout: str) -> tuple[tuple, tuple]:
    """(data shape, scale shape) for an input of `shape` flattened to m rows (docs/numerics.md)."""
    k = shape[-1]
    kb = k // fmt.block
    if m * kb > MAX_BLOCKS:
        raise ValueError(f"x: {m} x {k} holds {m * kb} scale blocks; at most {MAX_BLOCKS} are supported per call")
    if layout == "linear":
        s_shape = (m, kb)
    else:
        s_shape = ((m + SWIZZLE_ROWS - 1) // SWIZZLE_ROWS * SWIZZLE_ROWS,
                   (kb + SWIZZLE_COLS - 1) // SWIZZLE_COLS * SWIZZLE_COLS)
    return (*shape[:-1], k * fmt.element_bits // 8), s_shape


def check_global_scale(g: object, fmt: Format, device: torch.device, groups: int = 1, per: str = "",
                       arg: str = "x", name: str = "global_scale") -> None:
    """Check an NVFP4 global scale (the argument `name`): shape [1], or also [groups] (one per
    `per`) where `per` is given.

    `arg` names the input whose device it must share.
    """
    if not fmt.has_global_scale:
        raise ValueError(f"{name}: only NVFP4 takes a global scale; {fmt.name} must be called with None")
    shape = f"[1] or [{groups}] (one per {per})" if per else "[1]"
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"{name}: expected a float32 CUDA tensor of shape {shape} or None, got {type(g).__name__}")
    if g.dtype != torch.float32:
        raise ValueError(f"{name}: expected dtype torch.float32, got {g.dtype}")
    n = g.shape[0] if g.dim() == 1 else -1  # a 0-d tensor is not [1]: the kernel checks ndim == 1
    if n != 1 and not (per and n == groups):
        raise ValueError(f"{name}: expected shape {shape}, got {list(g.shape)}")
    if n > 1 and g.stride(0) != 1:
        raise ValueError(f"{name}: expected a contiguous tensor")
    check_device(name, g, device, arg)


def global_scale_arg(fmt: Format, g: Optional[torch.Tensor], device: torch.device) -> Optional[torch.Tensor]:
    """The kernel's global-scale argument: g, a cached [1.0] for NVFP4 without one, None for MX.

    MX modules keep the (compile-time None) global-scale slot in their signature.
    """
    if not fmt.has_global_scale:
        return None
    if g is not None:
        return g
    return unit_scale(device)


PAIR_SLOTS = ("out[0] (data)", "out[1] (scale)")


def check_out(out: object, device: torch.device, d_shape: tuple, s_shape: tuple,
              data_dtype: torch.dtype, scale_dtype: torch.dtype, arg: str = "x",
              slots: tuple[str, str] = PAIR_SLOTS) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate caller-provided `(data, scale)` buffers; return them in the format's dtypes.

    `arg` names the input whose device they must share, `slots` the two buffers in errors."""
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"out: expected a (data, scale) tuple of tensors, got {type(out).__name__}")
    return (_check_buffer(slots[0], out[0], d_shape, data_dtype, 16, device, arg),
            _check_buffer(slots[1], out[1], s_shape, scale_dtype, 4, device, arg))


def _check_buffer(name: str, t: object, shape: tuple, dtype: torch.dtype, align: int,
                  device: torch.device, arg: str = "x", raw_bytes: bool = True) -> torch.Tensor:
    """Validate one caller buffer (uint8 accepted for its bytes where `raw_bytes`); return it as `dtype`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    tdtype = t.dtype
    if tdtype is not dtype and (tdtype is not torch.uint8 or not raw_bytes):
        raise ValueError(f"{name}: expected dtype {dtype}{' (or torch.uint8)' if raw_bytes else ''}, got {tdtype}")
    if t.shape != shape:
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(t.shape)}")
    check_device(name, t, device, arg)
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor")
    if t.data_ptr() % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned data pointer")
    return t if tdtype is dtype else t.view(dtype)


def output_buffers(out: Any, device: torch.device, d_shape: tuple, s_shape: tuple, data_dtype: torch.dtype,
                   scale_dtype: torch.dtype, inputs: Named, arg: str = "x",
                   slots: tuple[str, str] = PAIR_SLOTS) -> tuple[torch.Tensor, torch.Tensor]:
    """The caller's `out` buffers checked, or fresh ones, in the format's dtypes (what kernels take).

    `inputs` are the (name, tensor) pairs the caller's buffers must not overlap."""
    data, scale = output_pairs([out], device, [(d_shape, s_shape, slots)], data_dtype, scale_dtype, inputs, arg)
    return data, scale


def output_pairs(outs: list, device: torch.device, specs: list[tuple[tuple, tuple, tuple[str, str]]],
                 data_dtype: torch.dtype, scale_dtype: torch.dtype, inputs: Named,
                 arg: str = "x") -> list[torch.Tensor]:
    """Several `(data, scale)` outputs of one op, flattened: each caller pair in `outs` checked
    against its (data shape, scale shape, slot names) in `specs`, or fresh buffers where None.
    The caller's buffers must not overlap each other or the (name, tensor) pairs of `inputs`.

    The CUDA check on the device of the input (named `arg`) comes after every pair's checks,
    so that every other argument error is reported (and testable) without a GPU.
    """
    checked = [None if o is None else check_out(o, device, ds, ss, data_dtype, scale_dtype, arg, sl)
               for o, (ds, ss, sl) in zip(outs, specs)]
    check_disjoint([(name, t) for pair, (_, _, slots) in zip(checked, specs) if pair is not None
                    for name, t in zip(slots, pair)], inputs)
    if device.type != "cuda":
        raise ValueError(f"{arg}: expected a CUDA tensor, got a tensor on {device}")
    check_launch_device(device, arg)
    res: list[torch.Tensor] = []
    for pair, (ds, ss, _) in zip(checked, specs):
        res += pair if pair is not None else (torch.empty(ds, dtype=data_dtype, device=device),
                                              torch.empty(ss, dtype=scale_dtype, device=device))
    return res


def results(out: Any, data: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What an op returns: the caller's buffers as given, or the fresh ones."""
    if out is None:
        return data, scale
    return out[0], out[1]


def fake_pair(x: torch.Tensor, format: str, layout: str, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (data, scale) of the shapes and dtypes quantize(x) returns (for fake implementations)."""
    fmt, _, data_dtype, scale_dtype = format_plan(format, layout, scale_mode)
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    d_shape, s_shape = output_shapes(fmt, tuple(x.shape), m, layout)
    return x.new_empty(d_shape, dtype=data_dtype), x.new_empty(s_shape, dtype=scale_dtype)


def _empty_pair(x: torch.Tensor, format: str, layout: str, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty rowwise pair that the four-output schemas return without the rowwise output."""
    _, _, data_dtype, scale_dtype = format_plan(format, layout, scale_mode)
    return x.new_empty((0,), dtype=data_dtype), x.new_empty((0,), dtype=scale_dtype)


def fake_four(x: torch.Tensor, format: str, layout: str, scale_mode: str, rowwise: bool) -> tuple[torch.Tensor, ...]:
    """Empty outputs of a four-output (rowwise pair, columnwise pair) op, for fake implementations."""
    fmt, _, data_dtype, scale_dtype = format_plan(format, layout, scale_mode)
    k = x.shape[-1]
    m = 1
    for d in x.shape[:-1]:
        m = m * d
    pair = fake_pair if rowwise else _empty_pair
    d_shape, s_shape = output_shapes(fmt, (k, m), k, layout)
    return (*pair(x, format, layout, scale_mode), x.new_empty(d_shape, dtype=data_dtype),
            x.new_empty(s_shape, dtype=scale_dtype))


def four(x: torch.Tensor, outs: tuple, format: str, layout: str, scale_mode: str) -> tuple[torch.Tensor, ...]:
    """Pad a (data_t, scale_t) result with the empty rowwise pair of the four-output schema."""
    if len(outs) == 4:
        return tuple(outs)
    return (*_empty_pair(x, format, layout, scale_mode), *outs)
