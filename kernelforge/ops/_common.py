"""Shared plumbing of the public ops: argument checks, output shapes, kernel lookup, devices.

Everything here sits on the per-call hot path: each torch attribute access costs ~0.3-1 us,
so helpers take what the caller already read instead of reading it again.
"""

import os
import weakref
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch

from ..cache.layers import resolve_layers
from ..formats import FORMATS, LAYOUTS, SWIZZLE_COLS, SWIZZLE_ROWS, Format
from ..limits import MAX_BLOCKS
from ..runtime.dispatch import DispatchTable
from ..runtime.tuning import m_bucket
from .unit_scale import unit_scale

DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
PLANS = {name: (f, getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)) for name, f in FORMATS.items()}

_table: Optional[DispatchTable] = None
_capability: dict[int, tuple[int, int]] = {}
_names: dict[int, str] = {}
_fn_cache: dict[tuple, Callable] = {}
MAX_FAST_CALLS = 256


class FastCall(NamedTuple):
    """A validated call into caller buffers (see `remember_fast`)."""

    fn: Callable  # the loaded kernel function
    refs: tuple  # weak references to the caller's persistent tensors (their death drops the entry)
    arg: Any  # the op's extra kernel arguments (its global-scale argument(s))
    x_bytes: int  # byte extent of an input of the remembered shape and strides
    out_spans: tuple[tuple[int, int], ...]  # [start, end) byte addresses of the out buffers
    alloc: tuple = ()  # for an allocating call: templates of what `allocate` makes (see there)


# Validated calls into caller buffers, by the op's fast-path key; see `remember_fast`.
fast_calls: dict[tuple, FastCall] = {}


def remember_fast(key: tuple, fn: Callable, tensors: tuple, arg: Any, x: torch.Tensor,
                  outs: Sequence[torch.Tensor], alloc: tuple = ()) -> None:
    """Record a fully validated call so the op's fast path (`fast_hit`) can repeat it without
    re-checking.

    The key holds everything validation depended on: the input's shape, strides, dtype and
    device, the op's options, and the ids of the caller's persistent `tensors` (out buffers,
    weight, global scale). An id identifies an object only while it lives, so the entry holds
    weak references whose callbacks drop it as soon as any of those tensors dies: an entry found
    under a key therefore names the very same objects, with no per-call comparison. Pointer
    alignment and dtypes are checked again by the kernel's TVM-FFI wrapper on every call. The
    input x is keyed by layout only, so a later x may lie anywhere: the entry keeps the out
    buffers' address ranges and x's byte extent. An allocating call (no out buffers) is
    remembered with `alloc`, the `(data shape, scale shape, data dtype, scale dtype, device)` of
    the fresh outputs, which `allocate` makes again.
    """
    if len(fast_calls) >= MAX_FAST_CALLS:
        fast_calls.clear()  # bounded: a loop over fresh buffers must not grow it forever

    def forget(_ref: object, key: tuple = key, calls: dict = fast_calls) -> None:
        calls.pop(key, None)  # the dict itself, not the module global (gone at interpreter exit)

    refs = tuple(weakref.ref(t, forget) for t in tensors if t is not None)
    start, end = byte_span(x)
    templates = ()
    if alloc:
        d_shape, s_shape, data_dtype, scale_dtype, device = alloc
        templates = (_template(d_shape, data_dtype, device), _template(s_shape, scale_dtype, device))
    fast_calls[key] = FastCall(fn, refs, arg, end - start, tuple(byte_span(o) for o in outs), templates)


def _template(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A one-element tensor expanded to `shape`: `torch.empty_like` of it is a fresh contiguous
    tensor of that shape, dtype and device (an expanded input is not dense, so empty_like lays
    the result out contiguously), while the template holds one element of memory."""
    return torch.empty((1,) * len(shape), dtype=dtype, device=device).expand(shape)


def allocate(hit: FastCall) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh contiguous (data, scale) outputs of a remembered allocating call.

    `torch.empty_like` of the remembered templates: two of them measured 3.27 us of host time
    on the H100 host against 5.79 us for two `torch.empty(shape, dtype=, device=)` calls
    (benchmarks/diag_alloc.py), whose keyword parsing is the difference."""
    d, s = hit.alloc
    return torch.empty_like(d), torch.empty_like(s)


def fast_hit(key: tuple, x: torch.Tensor) -> Optional[FastCall]:
    """The out= (or allocating) fast path of every op: the call remembered under `key` (see
    `remember_fast`; key[4] is x's device index), unless x overlaps one of its out buffers; else
    None. A dict lookup and a few integer compares per call (the ops build `key` inline: a
    generic key builder measured ~1 us per call on the H100). Raises only what
    `check_launch_device` raises (the caller's checked path explains anything else)."""
    hit = fast_calls.get(key)
    if hit is None:
        return None
    start = x.data_ptr()
    end = start + hit.x_bytes
    for lo, hi in hit.out_spans:
        if start < hi and lo < end:
            return None
    if key[4] != current_device():  # another device: see "Devices" below
        check_launch_device(x.device)
    return hit


def fast_key(op: str, x: Any, out: Any, options: tuple, others: tuple) -> Optional[tuple]:
    """The key `fast_hit` and `remember_fast` take for a call into caller buffers `out` with
    persistent tensors `(*out, *others)`: x's shape, strides, dtype and device, the op's
    `options`, the ids of `out` and `others` (None for arguments that are no such call)."""
    try:
        return (op, x.shape, x.stride(), x.dtype, x.get_device(), *options, *map(id, out), *map(id, others))
    except Exception:  # noqa: BLE001 - odd arguments: the checked path explains them
        return None


def fast_lookup(op: str, x: Any, out: Any, options: tuple, others: tuple) -> tuple[Optional[FastCall], Optional[tuple]]:
    """`(fast_hit, fast_key)` of a call in one step: the convenient form for plugin ops."""
    key = fast_key(op, x, out, options, others)
    if key is None:
        return None, None
    try:
        return fast_hit(key, x), key
    except RuntimeError:
        raise
    except Exception:  # noqa: BLE001
        return None, key


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


# --- Devices ---------------------------------------------------------------------------------
# Which device and stream a kernel launch uses (apache-tvm-ffi 0.1.15.post2's C ABI, nvidia-cutlass-dsl
# 4.8.1), so that an op on cuda:1 runs on cuda:1 whatever the current device is:
# * Stream. The launcher (build/launch.c, in the runtime library) does what tvm_ffi's own call
#   does (tvm_ffi/cython/function.pxi:219-230 and tvm_ffi_python_helpers.h:579-610): the first
#   non-CPU tensor argument of a call fixes the call's (device_type, device_id); torch's DLPack
#   exchange API `current_work_stream(device_type, device_id)` gives torch's current stream *of
#   that tensor's device* (`at::cuda::getCurrentCUDAStream(device_id)`); it is installed for the
#   call with TVMFFIEnvSetStream(device_type, device_id, stream) and the previous one restored.
#   Every kernel is compiled with `make_fake_stream(use_tvm_ffi_env_stream=True)`
#   (build/compile.py), so its wrapper reads TVMFFIEnvGetStream(kDLCUDA, device_id of its first
#   CUDA tensor parameter) (cutlass/base_dsl/tvm_ffi_builder/tvm_ffi_builder.py:2270-2301,
#   find_env_stream). Every op passes its input (x or w) first.
# * Device. The CuTe-DSL TVM-FFI wrapper itself guards the device: it calls cudaGetDevice, then
#   cudaSetDevice(device_id of the first CUDA tensor parameter) only where they differ, launches,
#   and restores the caller's device (cutlass/cutlass_dsl/tvm_ffi_provider.py:761-815,
#   generate_llvm_call / set_cuda_device_if_mismatch, and 819-828,
#   find_cuda_device_index_from_params). So no Python device guard wraps the launch: it would
#   repeat that one in microseconds instead of nanoseconds. The torch calls an op makes before
#   the launch (output allocation, the zero fill of empty problems, the cached [1.0] global scale)
#   all name the device explicitly.
# * Modules. One load per process serves every device: the loader loads each kernel module once
#   (runtime/loader.py), and the wrapper's first call runs cuda_dialect_init_library_once, which
#   loads the cubin with the context-independent cudaLibraryLoadData and then onto every visible
#   device (shared/notes/cute_dsl_aot.md, "Behaviour on a GPU of the wrong arch").
#   validation/test_multi_gpu.py checks it from fresh processes whose first call is on cuda:1.
# * What Python adds: every op checks that all its tensors are on the input's device
#   (`check_device`, a ValueError naming the argument and both devices, before anything runs),
#   and refuses a launch that a CUDA graph capture would silently miss (`check_launch_device`).

# The calling thread's current CUDA device: torch._C._cuda_getDevice is what
# torch.cuda.current_device() returns after its lazy-init check (~0.3 us saved per call); an
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


def set_cache_root(path: Optional[str | os.PathLike]) -> Path:
    """Use the cache at `path` alone (None: re-resolve: $KERNELFORGE_CACHE_DIR alone, else the
    checkout's or user's cache followed by the installed kernel wheels). Returns the first root."""
    global _table
    layers = resolve_layers(path)
    _table = DispatchTable(layers=layers)
    fast_calls.clear()
    return layers[0].root


def dispatch_table() -> DispatchTable:
    """The process-wide dispatch table (created on first use from the resolved cache root)."""
    if _table is None:
        set_cache_root(None)
    return _table  # type: ignore[return-value]


def device_capability(index: int) -> tuple[int, int]:
    cap = _capability.get(index)
    if cap is None:
        cap = _capability[index] = torch.cuda.get_device_capability(index)
    return cap


def device_name(index: int) -> str:
    """The device's name (what tuning tables are keyed by)."""
    name = _names.get(index)
    if name is None:
        name = _names[index] = torch.cuda.get_device_name(index)
    return name


def kernel_for(op: str, coords: tuple[tuple[str, str], ...], dev: int, k: int, block: int,
               ptr: int, stride_bytes: int, m: int) -> Callable:
    """The loaded function for `op` at `coords` (sorted (axis, value) pairs) and this input.

    The K-class choice depends on K, on the pointer alignment up to 16 bytes and on the row
    stride mod 16 (every vector_bytes divides 16) and M mod 128 (every m_multiple divides 128),
    the tuned build on the bucket of M, so memoizing on exactly these is exact.
    """
    align = ptr & -ptr if ptr else 1 << 30
    table = dispatch_table()
    bucket = m_bucket(m)
    memo = (op, coords, dev, k, min(align, 16), stride_bytes % 16, bucket, m & 127, table)
    fn = _fn_cache.get(memo)
    if fn is None:
        fn, _ = table.resolve(op, dict(coords), device_capability(dev), k, block, align, stride_bytes, m,
                              device_name(dev))
        _fn_cache[memo] = fn
    return fn


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
    """(data shape, scale shape) for an input of `shape` flattened to m rows (NUMERICS.md)."""
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


# --- Fake implementations (torch.compile) -----------------------------------------------------

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
