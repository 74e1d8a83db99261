"""When the columnwise op writes linear scales as swizzled scales and then rewrites them with the
`scale_layout` pass (`kernelforge/families/scale_layout/op.py` runs it; `kernelforge explain` reports
it). Torch-free: the CLI reads it without importing torch.

Which path is faster depends on the card: the pass adds a launch and two trips of the scale bytes
through memory, the direct kernel's linear scale stores are partial sectors, and how much of either
a kernel hides behind its arithmetic differs between an H100 and an H200. So the rule is measured:
`kernelforge tune` times both paths per format and output set and stores the smallest input from
which the staged path is faster in the card's tuning table (`staging`), and the op follows the
table of the card it runs on. Without such a table, the shipped `STAGED_MIN_ELEMENTS` decides.
"""
from __future__ import annotations

from collections.abc import Mapping

SECTOR_BYTES = 32  # bytes of a linear row that one thread of the pass writes (the K-class's block)

# The shipped rule, measured on an H100 (docs/performance.md; `benchmarks/diag.py dual-unswizzle`
# measures both paths): (format, output set) -> the smallest input (M x K elements) at which the
# staged path is taken; a pair that is not listed always takes the direct kernel. A card whose
# tuning table measured a pair follows the table for that pair instead (`staged_shape`).
STAGED_MIN_ELEMENTS: dict[tuple[str, str], int] = {
    ("mxfp8", "dual"): 1 << 24,
    ("mxfp4", "dual"): 1 << 25,
    ("nvfp4", "dual"): 1 << 25,
    ("mxfp8", "columnwise"): 1 << 25,
    ("mxfp4", "columnwise"): 1 << 26,
}

# The (format, output set) pairs `kernelforge tune` measures: every format with a staged path.
PAIRS = tuple((f, o) for f in ("mxfp8", "mxfp4", "nvfp4") for o in ("dual", "columnwise"))


def pair_name(fmt_name: str, outputs: str) -> str:
    """A pair's key in a tuning table's `staging.min_elements` ("nvfp4.dual")."""
    return f"{fmt_name}.{outputs}"


def staged_shape(fmt_name: str, block: int, m: int, k: int, rowwise: bool, transform: str,
                 measured: Mapping[str, int | None] | None = None) -> bool:
    """Whether a columnwise call of this format, output set and shape ([M, K], B = `block`) with
    linear scales is staged, buffers aside: a large enough input, no transform, and every linear
    scale row in whole 32-byte sectors (K/B for the rowwise scales of a dual call, M/B for the
    columnwise ones), which the pass's K-class needs. "Large enough" is the card's `measured` rule
    (a tuning table's `staging.min_elements`: "<format>.<outputs>" -> elements, or None: never) for
    the pairs it names, the shipped STAGED_MIN_ELEMENTS for the others."""
    pair = (fmt_name, "dual" if rowwise else "columnwise")
    name = pair_name(*pair)
    threshold = measured[name] if measured is not None and name in measured else STAGED_MIN_ELEMENTS.get(pair)
    if threshold is None or transform != "none" or m * k < threshold:
        return False
    if rowwise and (k // block) % SECTOR_BYTES:
        return False
    return (m // block) % SECTOR_BYTES == 0
