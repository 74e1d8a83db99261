"""When the columnwise op writes linear scales as swizzled scales and then rewrites them with the
`scale_layout` pass (`kernelforge/ops/scale_layout.py` runs it; `kernelforge explain` reports
it). Torch-free: the CLI reads it without importing torch."""
from __future__ import annotations

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
