"""The `scale_layout` op family: swizzled -> linear rewrite of one or two block-scale matrices
(as 4-byte words). Internal: the columnwise op's linear path at large shapes
(`kernelforge.families.scale_layout.staging` decides). The K-class bounds the linear
rows: whole 32-byte sectors, 16-byte aligned. Imports neither torch nor cutlass.
"""
from __future__ import annotations

from pathlib import Path

from kernelforge.registry import OpFamily
from kernelforge.schema import op_schema

HERE = Path(__file__).resolve().parent

FAMILY = OpFamily(
    schema=op_schema("scale_layout", ("kclass", "arch")),
    sources=("kernel.py", "build.py"),
    source_root=HERE,
    builder="kernelforge.families.scale_layout.build:scale_layout_args",
    args=("scale", "linear_scale", "scale_t", "linear_scale_t"),
    spec_files=(HERE / "spec.toml",),
)
