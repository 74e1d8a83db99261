"""The `quantize_columnwise` op family: columnwise (x.T) quantization, alone or with the rowwise
output from one read of x ("dual"), optionally of the Hadamard-transformed columns. K-classes
also bound M. No tuning axes. Imports neither torch nor cutlass.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kernelforge.registry import OpFamily
from kernelforge.schema import SCALE_MODE_FITS_FORMAT, Axis, Constraint, Value, op_schema

HERE = Path(__file__).resolve().parent

# "columnwise" writes x.T's quantization only, "dual" both sides.
OUTPUTS = Axis("outputs", str, choices=("columnwise", "dual"))
# "rht" = random Hadamard transform of 16-row groups (NVFP4, bf16).
TRANSFORM = Axis("transform", str, choices=("none", "rht"))


def _rht_is_nvfp4_bf16(c: Mapping[str, Value]) -> str | None:
    if c["transform"] == "rht" and (c["format"] != "nvfp4" or c["dtype"] != "bfloat16"):
        return "transform 'rht' is defined for format 'nvfp4' with dtype 'bfloat16' only (docs/numerics.md)"
    return None


FAMILY = OpFamily(
    schema=op_schema(
        "quantize_columnwise",
        ("format", "scale_mode", "layout", "dtype", OUTPUTS, TRANSFORM, "kclass", "arch"),
        (),
        (SCALE_MODE_FITS_FORMAT, Constraint(("transform", "format", "dtype"), _rht_is_nvfp4_bf16)),
    ),
    sources=("scale_tile.py", "kernel.py", "build.py"),
    source_root=HERE,
    builder="kernelforge.families.quantize_columnwise.build:quantize_columnwise_args",
    args=("x", "data", "scale", "data_t", "scale_t", "global_scale_row", "global_scale_col", "sign_mask"),
    spec_files=(HERE / "spec.toml",),
    # No front door of its own: `kernelforge.quantize(..., columnwise=...)` and
    # `kernelforge.quantize_nvfp4_rht` (the quantize family) launch its kernels through op.py.
)
