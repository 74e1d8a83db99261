"""The `quantize` op family: rowwise block-scaled quantization (MXFP8, MXFP4, NVFP4).

Imports neither torch nor cutlass (the timing calls import torch when `kernelforge tune` runs them).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelforge.registry import OpFamily
from kernelforge.schema import SCALE_MODE_FITS_FORMAT, Axis, op_schema

HERE = Path(__file__).resolve().parent

THREADS = Axis("threads", int, check=lambda v: 32 <= v <= 1024 and v % 32 == 0,
               expected="a multiple of 32 in 32..1024", abbrev="t")
UNITS_PER_THREAD = Axis("units_per_thread", int, check=lambda v: 1 <= v <= 16,
                        expected="an integer in 1..16", abbrev="u")


def heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA, then fewer units per thread (docs/performance.md, tuning)."""
    return (values.get("threads") != 128, values.get("units_per_thread") or 0)


def timing_calls(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """What `kernelforge tune` times: fresh [m, k] inputs rotated beyond 4x L2."""
    from kernelforge.testing import rotating_inputs

    r = rotating_inputs(coords, m, k, l2_bytes)
    return [lambda x=x: fn(x, r.data, r.scale, r.global_scale) for x in r.inputs()]


FAMILY = OpFamily(
    schema=op_schema(
        "quantize",
        ("format", "scale_mode", "layout", "dtype", "kclass", "arch"),
        (THREADS, UNITS_PER_THREAD),
        (SCALE_MODE_FITS_FORMAT,),
    ),
    sources=("kernel.py", "build.py"),
    source_root=HERE,
    builder="kernelforge.families.quantize.build:quantize_args",
    args=("x", "data", "scale", "global_scale"),
    heuristic=heuristic,
    timing_calls=timing_calls,
    spec_files=(HERE / "spec.toml",),
    # The quantization front doors: rowwise here; columnwise, dual and the Hadamard transform run
    # the quantize_columnwise family's kernels (its op module is their launcher).
    api=("kernelforge.families.quantize.op:quantize", "kernelforge.ops.calibration:nvfp4_global_scale",
         "kernelforge.families.quantize.rht:quantize_nvfp4_rht", "kernelforge.families.quantize.rht:rht_global_scale"),
)
