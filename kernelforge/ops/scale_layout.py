"""Linear block scales written as swizzled scales and then rewritten by the layout pass
(`kernels/scale_layout.py`): when the columnwise op does that, and the pass itself."""
from __future__ import annotations

import torch

from ..formats import SWIZZLE_ROWS, Format
from . import _common as c

SECTOR_BYTES = 32  # bytes of a linear row that one thread of the pass writes (the K-class's block)

# The smallest input (M x K elements) at which the staged path beats the direct linear kernel,
# per format and output set; pairs not listed always take the direct kernel. H100, CUDA-graph
# replay, both paths in one run (benchmarks/diag_dual_unswizzle.py, RESULTS.md session 15), us:
#   dual        4096x7168: MXFP8 49.7 -> 46.9, MXFP4 37.6 -> 38.9, NVFP4 38.5 -> 39.5
#               8192x7168: MXFP8 101.2 -> 90.4, MXFP4 72.4 -> 70.6, NVFP4 75.2 -> 74.9
#               16384x8192: MXFP8 234.3 -> 200.4, MXFP4 161.9 -> 150.7, NVFP4 174.9 -> 167.4
#   columnwise  4096x7168: MXFP8 32.7 -> 34.3, MXFP4 29.1 -> 30.2 (NVFP4 slower at every size)
#               8192x7168: MXFP8 67.5 -> 65.2, MXFP4 54.4 -> 55.1
#               16384x8192: MXFP8 155.3 -> 144.9, MXFP4 124.7 -> 120.0
STAGED_MIN_ELEMENTS: dict[tuple[str, str], int] = {
    ("mxfp8", "dual"): 1 << 24,
    ("mxfp4", "dual"): 1 << 25,
    ("nvfp4", "dual"): 1 << 25,
    ("mxfp8", "columnwise"): 1 << 25,
    ("mxfp4", "columnwise"): 1 << 26,
}


def staged(fmt: Format, m: int, k: int, rowwise: bool, transform: str,
           linear_scales: tuple[torch.Tensor, ...]) -> bool:
    """Whether the columnwise op writes these linear scales swizzled, then rewrites them with the
    pass: a large enough input for its format and outputs (STAGED_MIN_ELEMENTS), no transform,
    and every linear scale matrix in whole 32-byte sectors per row, 16-byte aligned and
    contiguous (the pass's K-class)."""
    threshold = STAGED_MIN_ELEMENTS.get((fmt.name, "dual" if rowwise else "columnwise"))
    if threshold is None or transform != "none" or m * k < threshold:
        return False
    if rowwise and (k // fmt.block) % SECTOR_BYTES:
        return False
    if (m // fmt.block) % SECTOR_BYTES:
        return False
    return all(s.data_ptr() % 16 == 0 and s.is_contiguous() for s in linear_scales)


def swizzled_like(linear: torch.Tensor) -> torch.Tensor:
    """A scratch swizzled scale matrix for the linear scales `linear` [M, C] (C a multiple of 4)."""
    rows, cols = linear.shape
    padded = (rows + SWIZZLE_ROWS - 1) // SWIZZLE_ROWS * SWIZZLE_ROWS
    return torch.empty((padded, cols), dtype=linear.dtype, device=linear.device)


def unswizzle_into(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Rewrite one or two (swizzled, linear) scale matrices, swizzled -> linear, in one launch on
    the current stream. Each linear matrix is [M, C] with C a multiple of 32, 16-byte aligned,
    each swizzled one [roundup(M, 128), C] (as `staged` and `swizzled_like` ensure)."""
    src, dst = (_words(pairs[0][0]).view(-1), _words(pairs[0][1]))
    rows, cols = pairs[0][1].shape
    fn = c.kernel_for("scale_layout", (), dst.device.index, cols, SECTOR_BYTES, dst.data_ptr(), cols, rows)
    if len(pairs) > 1:
        fn(src, dst, _words(pairs[1][0]).view(-1), _words(pairs[1][1]))
    else:  # the kernel takes two pairs; zero rows of the first (same pointers) add no work
        fn(src, dst, src[:0], dst[:0])


def _words(scales: torch.Tensor) -> torch.Tensor:
    """The scale bytes as int32 words (4 scale columns each)."""
    return scales.view(torch.uint8).view(torch.int32)
