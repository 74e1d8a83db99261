"""One registry of the block-scaled formats: block size, element and scale encodings, dtypes.

Kernels, references, validation and specs all read this table; nothing else hard-codes a
block size or a maximum. It imports neither torch nor cutlass.
"""
from __future__ import annotations

from typing import NamedTuple


class Format(NamedTuple):
    """A block-scaled quantization format (docs/numerics.md).

    A NamedTuple, not a frozen dataclass: every `import kernelforge` creates this class, and a
    frozen dataclass is much slower to create."""

    name: str
    block: int  # elements per scale block along K
    element: str  # "e4m3" | "e2m1"
    scale: str  # "ue8m0" | "ue4m3"
    element_bits: int
    emax: int  # exponent of the largest element power of two (E4M3: 8, E2M1: 2)
    maxv: float  # largest finite element magnitude
    scale_modes: tuple[str, ...]  # "none" for formats without a mode choice
    data_dtype: str  # torch dtype name of the returned data tensor
    scale_dtype: str  # torch dtype name of the returned scale tensor
    nan_scale_byte: int  # scale byte written for a block holding NaN or Inf
    has_global_scale: bool

    @property
    def elements_per_byte(self) -> int:
        return 8 // self.element_bits

    def data_cols(self, k: int) -> int:
        """Bytes of packed data per row of K elements."""
        return k // self.elements_per_byte


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("mxfp8", 32, "e4m3", "ue8m0", 8, 8, 448.0, ("floor", "rceil"),
               "float8_e4m3fn", "float8_e8m0fnu", 0xFF, False),
        Format("mxfp4", 32, "e2m1", "ue8m0", 4, 2, 6.0, ("floor", "rceil"),
               "float4_e2m1fn_x2", "float8_e8m0fnu", 0xFF, False),
        Format("nvfp4", 16, "e2m1", "ue4m3", 4, 2, 6.0, ("none",),
               "float4_e2m1fn_x2", "float8_e4m3fn", 0x7F, True),
    )
}

INPUT_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
LAYOUTS: tuple[str, ...] = ("linear", "swizzled")
SCALE_MODES: tuple[str, ...] = ("floor", "rceil", "none")

# 128x4 swizzled scale layout (docs/numerics.md): rows padded to 128, scale columns to 4.
SWIZZLE_ROWS = 128
SWIZZLE_COLS = 4


def get_format(name: str) -> Format:
    """Look a format up by name; raise ValueError naming the known ones."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"format: expected one of {sorted(FORMATS)}, got {name!r}"
        ) from None


def round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def scale_shape(fmt: Format, m: int, k: int, layout: str) -> tuple[int, int]:
    """Shape of the scale tensor for an [m, k] input."""
    cols = k // fmt.block
    if layout == "linear":
        return (m, cols)
    if layout == "swizzled":
        return (round_up(m, SWIZZLE_ROWS), round_up(cols, SWIZZLE_COLS))
    raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {layout!r}")
