"""Linear block scales written as swizzled scales and then rewritten by the layout pass
(`kernelforge/families/scale_layout/kernel.py`): when the columnwise op does that, and the pass itself."""
from __future__ import annotations

from collections.abc import Callable

import torch

from kernelforge.formats import SWIZZLE_ROWS, Format, round_up
from kernelforge.ops import fast_path, launch

from . import staging


def staged(fmt: Format, m: int, k: int, rowwise: bool, transform: str,
           linear_scales: tuple[torch.Tensor, ...]) -> bool:
    """Whether the columnwise op writes these linear scales swizzled, then rewrites them with the
    pass: the shape rule (`kernelforge.families.scale_layout.staging.staged_shape`) of the device's
    tuning table (`launch.staging_rule`), else the shipped one, and every linear scale matrix
    16-byte aligned and contiguous (the pass's K-class)."""
    if not staging.staged_shape(fmt.name, fmt.block, m, k, rowwise, transform,
                                launch.staging_rule(linear_scales[0].device.index)):
        return False
    return all(s.data_ptr() % 16 == 0 and s.is_contiguous() for s in linear_scales)


def swizzled_template(linear: torch.Tensor) -> torch.Tensor:
    """What `torch.empty_like` makes a scratch swizzled scale matrix from, for the linear scales
    `linear` [M, C] (C a multiple of 4): [roundup(M, 128), C] of its dtype (`fast_path._template`)."""
    rows, cols = linear.shape
    return fast_path._template((round_up(rows, SWIZZLE_ROWS), cols), linear.dtype, linear.device)


def pass_kernel(linear: torch.Tensor) -> Callable:
    """The loaded pass for linear scales like `linear` (the first matrix of a call); raises
    KernelNotBuilt when the cache holds no build of it for this device."""
    rows, cols = linear.shape
    return launch.kernel_for("scale_layout", (), linear.device.index, cols, staging.SECTOR_BYTES, linear.data_ptr(),
                        cols, rows)


def staged_call(fn: Callable, unswizzle: Callable, linear: tuple[torch.Tensor, ...]) -> Callable:
    """The staged path as one callable with the columnwise kernel's signature (so the op calls and
    remembers it like the direct kernel): scratch swizzled scales (fresh each call, none held),
    the swizzled kernel `fn` into them, then the pass `unswizzle` into the linear scales it is
    given. `linear` are the linear scales of the call it is made for: their word views are made
    once (the out= fast path repeats a call into the same buffers, and making the views on every
    call would be a large share of its host time)."""
    templates = tuple(map(swizzled_template, linear))
    words = tuple(map(_words, linear))

    def call(x: torch.Tensor, data: torch.Tensor | None, scale: torch.Tensor | None, data_t: torch.Tensor,
             scale_t: torch.Tensor, g_row: object, g_col: object, sign_mask: int) -> None:
        given = (scale_t,) if scale is None else (scale, scale_t)
        dst = words if all(a is b for a, b in zip(given, linear)) else tuple(map(_words, given))
        written = [torch.empty_like(t) for t in templates]
        fn(x, data, None if scale is None else written[0], data_t, written[-1], g_row, g_col, sign_mask)
        src = [_words(w).view(-1) for w in written]
        if len(src) > 1:
            unswizzle(src[0], dst[0], src[1], dst[1])
        else:  # the kernel takes two pairs; zero rows of the first (same pointers) add no work
            unswizzle(src[0], dst[0], src[0][:0], dst[0][:0])

    return call


def _words(scales: torch.Tensor) -> torch.Tensor:
    """The scale bytes as int32 words (4 scale columns each)."""
    return scales.view(torch.int32)
