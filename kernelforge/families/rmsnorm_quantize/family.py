"""The `rmsnorm_quantize` op family: RMSNorm (optionally after a residual add) fused with
rowwise block-scaled quantization. The K-class is a hidden-size class: it bounds H and says
how rows map onto threads and CTAs.

Imports neither torch nor cutlass (the timing calls import torch when `kernelforge tune` runs them).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelforge.registry import OpFamily
from kernelforge.schema import HALF_DTYPE, SCALE_MODE_FITS_FORMAT, Axis, op_schema

HERE = Path(__file__).resolve().parent

# "none" = rmsnorm(x); "add" = rmsnorm(x + residual), the residual updated in place.
RESIDUAL = Axis("residual", str, choices=("none", "add"))
# Elements of a row each thread keeps in registers (whole scale blocks of every format).
ELEMENTS = Axis("elements", int, check=lambda v: 32 <= v <= 256 and v % 32 == 0,
                expected="a multiple of 32 in 32..256", abbrev="e")
# CTAs that share one row: 1, or a thread-block cluster of 2, 4 or 8 CTAs exchanging the row's
# partial sums through distributed shared memory.
CTAS_PER_ROW = Axis("ctas_per_row", int, choices=(1, 2, 4, 8), abbrev="c")


def heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """32 elements per thread for hidden sizes up to 8192, 64 above; one CTA per row
    (docs/performance.md, tuning)."""
    return (values.get("elements") != (64 if max_k > 8192 else 32), values.get("ctas_per_row", 1) != 1)


def timing_calls(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """What `kernelforge tune` times: fresh x (and residual) [m, k] and weight [k], rotated beyond 4x L2."""
    from kernelforge.testing import rotating_inputs

    add = coords.get("residual") == "add"
    r = rotating_inputs(coords, m, k, l2_bytes, inputs_per_call=2 if add else 1)
    calls = []
    for x in r.inputs():
        w = r.like((k,))
        res = r.like((m, k)) if add else None
        calls.append(lambda x=x, res=res, w=w: fn(x, res, w, r.data, r.scale, r.global_scale, 1e-6))
    return calls


FAMILY = OpFamily(
    schema=op_schema(
        "rmsnorm_quantize",
        ("format", "scale_mode", "layout", HALF_DTYPE, RESIDUAL, "kclass", "arch"),
        (ELEMENTS, CTAS_PER_ROW),
        (SCALE_MODE_FITS_FORMAT,),
        kclass_required=("max_k",),
    ),
    sources=("kernel.py", "build.py"),
    source_root=HERE,
    builder="kernelforge.families.rmsnorm_quantize.build:rmsnorm_quantize_args",
    args=("x", "residual", "weight", "data", "scale", "global_scale", "eps"),
    heuristic=heuristic,
    timing_calls=timing_calls,
    spec_files=(HERE / "spec.toml",),
    api=("kernelforge.families.rmsnorm_quantize.op:rmsnorm_quantize",
         "kernelforge.families.rmsnorm_quantize.op:add_rmsnorm_quantize"),
)
