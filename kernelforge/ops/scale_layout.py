"""Linear block scales written as swizzled scales and then rewritten by the layout pass
(`kernels/scale_layout.py`): when the columnwise op does that, and the pass itself."""
from __future__ import annotations

from collections.abc import Callable

import torch

from .. import staging
from ..formats import SWIZZLE_ROWS, Format
from . import _common as c


def staged(fmt: Format, m: int, k: int, rowwise: bool, transform: str,
           linear_scales: tuple[torch.Tensor, ...]) -> bool:
    """Whether the columnwise op writes these linear scales swizzled, then rewrites them with the
    pass: the shape rule (`kernelforge.staging.staged_shape`) and every linear scale matrix
    16-byte aligned and contiguous (the pass's K-class)."""
    if not staging.staged_shape(fmt.name, fmt.block, m, k, rowwise, transform):
        return False
    return all(s.data_ptr() % 16 == 0 and s.is_contiguous() for s in linear_scales)


def swizzled_like(linear: torch.Tensor) -> torch.Tensor:
    """A scratch swizzled scale matrix for the linear scales `linear` [M, C] (C a multiple of 4)."""
    rows, cols = linear.shape
    padded = (rows + SWIZZLE_ROWS - 1) // SWIZZLE_ROWS * SWIZZLE_ROWS
    return torch.empty((padded, cols), dtype=linear.dtype, device=linear.device)


def pass_kernel(linear: torch.Tensor) -> Callable:
    """The loaded pass for linear scales like `linear` (the first matrix of a call); raises
    KernelNotBuilt when the cache holds no build of it for this device."""
    rows, cols = linear.shape
    return c.kernel_for("scale_layout", (), linear.device.index, cols, staging.SECTOR_BYTES, linear.data_ptr(),
                        cols, rows)


def unswizzle_into(fn: Callable, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Rewrite one or two (swizzled, linear) scale matrices, swizzled -> linear, with the pass `fn`
    (`pass_kernel` of the first linear matrix) in one launch on the current stream. Each linear
    matrix is [M, C] with C a multiple of 32, 16-byte aligned, each swizzled one
    [roundup(M, 128), C] (as `staged` and `swizzled_like` ensure)."""
    src, dst = (_words(pairs[0][0]).view(-1), _words(pairs[0][1]))
    if len(pairs) > 1:
        fn(src, dst, _words(pairs[1][0]).view(-1), _words(pairs[1][1]))
    else:  # the kernel takes two pairs; zero rows of the first (same pointers) add no work
        fn(src, dst, src[:0], dst[:0])


def staged_call(fn: Callable, unswizzle: Callable) -> Callable:
    """The staged path as one callable with the columnwise kernel's signature (so the op calls and
    remembers it like the direct kernel): scratch swizzled scales for the linear ones it is given,
    the swizzled kernel `fn` into them, then the pass `unswizzle` into the linear ones."""
    def call(x: torch.Tensor, data: torch.Tensor | None, scale: torch.Tensor | None, data_t: torch.Tensor,
             scale_t: torch.Tensor, g_row: object, g_col: object, sign_mask: int) -> None:
        linear = (scale_t,) if scale is None else (scale, scale_t)
        written = tuple(map(swizzled_like, linear))
        fn(x, data, None if scale is None else written[0], data_t, written[-1], g_row, g_col, sign_mask)
        unswizzle_into(unswizzle, list(zip(written, linear)))

    return call


def _words(scales: torch.Tensor) -> torch.Tensor:
    """The scale bytes as int32 words (4 scale columns each)."""
    return scales.view(torch.uint8).view(torch.int32)
