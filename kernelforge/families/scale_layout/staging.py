"""When the columnwise op writes linear scales as swizzled scales and then rewrites them with the
`scale_layout` pass (`kernelforge/families/scale_layout/op.py` runs it; `kernelforge explain` reports
it). Torch-free: the CLI reads it without importing torch."""
from __future__ import annotations

SECTOR_BYTES = 32  # bytes of a linear row that one thread of the pass writes (the K-class's block)

# The smallest input (M x K elements) at which the staged path beats the direct linear kernel,
# per format and output set; pairs not listed (columnwise-only NVFP4 among them) always take the
# direct kernel (docs/performance.md; `benchmarks/diag.py dual-unswizzle` measures both paths).
STAGED_MIN_ELEMENTS: dict[tuple[str, str], int] = {
    ("mxfp8", "dual"): 1 << 24,
    ("mxfp4", "dual"): 1 << 25,
    ("nvfp4", "dual"): 1 << 25,
    ("mxfp8", "columnwise"): 1 << 25,
    ("mxfp4", "columnwise"): 1 << 26,
}


def staged_shape(fmt_name: str, block: int, m: int, k: int, rowwise: bool, transform: str) -> bool:
    """Whether a columnwise call of this format, output set and shape ([M, K], B = `block`) with
    linear scales is staged, buffers aside: a large enough input (STAGED_MIN_ELEMENTS), no
    transform, and every linear scale row in whole 32-byte sectors (K/B for the rowwise scales of
    a dual call, M/B for the columnwise ones), which the pass's K-class needs."""
    threshold = STAGED_MIN_ELEMENTS.get((fmt_name, "dual" if rowwise else "columnwise"))
    if threshold is None or transform != "none" or m * k < threshold:
        return False
    if rowwise and (k // block) % SECTOR_BYTES:
        return False
    return (m // block) % SECTOR_BYTES == 0
