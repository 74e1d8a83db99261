"""The `quantize_grouped` op family: rowwise quantization of every group of a grouped
(mixture-of-experts) input in one launch.

Imports neither torch nor cutlass (the timing calls import torch when `kernelforge tune` runs them).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelforge.registry import OpFamily
from kernelforge.schema import SCALE_MODE_FITS_FORMAT, Axis, Constraint, Value, op_schema

HERE = Path(__file__).resolve().parent

# "experts" = a stacked [E, N, K] input with per-expert scale slabs; "offsets" = a [T, K] input
# split into row groups by cumulative group ends.
GROUPING = Axis("grouping", str, choices=("experts", "offsets"))
THREADS = Axis("threads", int, check=lambda v: 32 <= v <= 1024 and v % 32 == 0,
               expected="a multiple of 32 in 32..1024", abbrev="t")


def _grouping_fits_layout(c: Mapping[str, Value]) -> str | None:
    if c["grouping"] == "offsets" and c["layout"] != "swizzled":
        return f"grouping 'offsets' has swizzled scales only (got layout {c['layout']!r})"
    return None


def heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA (as quantize)."""
    return (values.get("threads") != 128,)


def timing_calls(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """One expert / one group of m rows (its scale rows are then those of quantize)."""
    import torch

    from kernelforge.testing import rotating_inputs

    r = rotating_inputs(coords, m, k, l2_bytes)
    ends = torch.tensor([m], dtype=torch.int32, device="cuda")
    starts = torch.empty(1, dtype=torch.int32, device="cuda")
    data, scale, g = r.data, r.scale, r.global_scale
    if coords["grouping"] == "experts":
        d3, s3 = data.view(1, *data.shape), scale.view(1, *scale.shape)
        return [lambda x=x: fn(x.view(1, m, k), None, d3, s3, None, g) for x in r.inputs()]
    return [lambda x=x: fn(x, ends, data, scale, starts, g) for x in r.inputs()]


FAMILY = OpFamily(
    schema=op_schema(
        "quantize_grouped",
        ("format", "scale_mode", "layout", GROUPING, "dtype", "kclass", "arch"),
        (THREADS,),
        (SCALE_MODE_FITS_FORMAT, Constraint(("grouping", "layout"), _grouping_fits_layout)),
    ),
    # The experts kernel maps its scale slots with quantize's `slot_coords`: that file's bytes count too.
    sources=("kernel.py", "build.py", "../quantize/kernel.py"),
    source_root=HERE,
    builder="kernelforge.families.quantize_grouped.build:quantize_grouped_args",
    args=("x", "group_offsets", "data", "scale", "scale_offsets", "global_scale"),
    heuristic=heuristic,
    timing_calls=timing_calls,
    spec_files=(HERE / "spec.toml",),
    api=("kernelforge.families.quantize_grouped.op:quantize_experts",
         "kernelforge.families.quantize_grouped.op:quantize_grouped",
         "kernelforge.families.quantize_grouped.op:group_offsets_valid"),
)
