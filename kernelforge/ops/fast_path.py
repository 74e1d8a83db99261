"""The out= fast path: validated calls into caller buffers, remembered by shape, strides,
dtypes and addresses, so a repeated call skips every check (see `remember_fast`)."""

import weakref
from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch

from . import checks
from .checks import byte_span

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

    `torch.empty_like` of the remembered templates: it takes less host time than
    `torch.empty(shape, dtype=, device=)`, whose keyword parsing is the difference
    (docs/performance.md; `benchmarks/diag.py alloc`)."""
    d, s = hit.alloc
    return torch.empty_like(d), torch.empty_like(s)


def fast_hit(key: tuple, x: torch.Tensor) -> Optional[FastCall]:
    """The out= (or allocating) fast path of every op: the call remembered under `key` (see
    `remember_fast`; key[4] is x's device index), unless x overlaps one of its out buffers; else
    None. A dict lookup and a few integer compares per call (the ops build `key` inline: a
    generic key builder would add host time to every call). Raises only what
    `check_launch_device` raises (the caller's checked path explains anything else)."""
    hit = fast_calls.get(key)
    if hit is None:
        return None
    start = x.data_ptr()
    end = start + hit.x_bytes
    for lo, hi in hit.out_spans:
        if start < hi and lo < end:
            return None
    if key[4] != checks.current_device():  # another device: see "Devices" below
        checks.check_launch_device(x.device)
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
