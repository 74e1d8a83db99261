"""The op families that ship with kernelforge.

Each definition below is the one place its op's schema, kernel sources, builder, argument
signature, tuning heuristic and timing calls are written down; `OP_SCHEMAS`, `OP_SOURCES`,
the builders `compile_variant` calls, `TUNING_AXES`, `heuristic_rank` and the tuner's calls
all read them. Imports neither torch nor cutlass (the timing calls import torch when run).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kernelforge.families import OpFamily
from kernelforge.formats import FORMATS
from kernelforge.spec.schema import AXES, Axis, Constraint, OpSchema, Value


def _scale_mode_fits_format(c: Mapping[str, Value]) -> str | None:
    allowed = FORMATS[c["format"]].scale_modes
    if c["scale_mode"] in allowed:
        return None
    return (f"scale_mode {c['scale_mode']!r} is not valid for format {c['format']!r} "
            f"(allowed: {list(allowed)})")


def _grouping_fits_layout(c: Mapping[str, Value]) -> str | None:
    if c["grouping"] == "offsets" and c["layout"] != "swizzled":
        return f"grouping 'offsets' has swizzled scales only (got layout {c['layout']!r})"
    return None


def _rht_is_nvfp4_bf16(c: Mapping[str, Value]) -> str | None:
    if c["transform"] == "rht" and (c["format"] != "nvfp4" or c["dtype"] != "bfloat16"):
        return "transform 'rht' is defined for format 'nvfp4' with dtype 'bfloat16' only (NUMERICS.md)"
    return None


SCALE_MODE_FITS_FORMAT = Constraint(("format", "scale_mode"), _scale_mode_fits_format)

# The fused RMSNorm kernels take 16-bit inputs only (the weight has the input's dtype).
HALF_DTYPE = Axis("dtype", str, choices=("bfloat16", "float16"))


def schema(name: str, dispatch: tuple[str, ...], tuning: tuple[str, ...],
           constraints: tuple[Constraint, ...] = (), domains: tuple[Axis, ...] = (),
           kclass_required: tuple[str, ...] = ()) -> OpSchema:
    """An OpSchema over the shared axes of `kernelforge.spec.schema.AXES` (by name), with
    `domains` replacing or adding axes of the op's own."""
    doms = {a: AXES[a] for a in dispatch + tuning if a in AXES} | {d.name: d for d in domains}
    return OpSchema(name, dispatch, tuning, doms, constraints, kclass_required=kclass_required)


# -- tuning heuristics: (max_k, tuning values) -> sort key, smallest chosen (see runtime/tuning.py)

def quantize_heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA, then fewer units per thread (H100: best in most shapes)."""
    return (values.get("threads") != 128, values.get("units_per_thread") or 0)


def rmsnorm_quantize_heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """32 elements per thread for hidden sizes up to 8192, 64 above."""
    return (values.get("elements") != (64 if max_k > 8192 else 32),)


def quantize_grouped_heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA (as quantize)."""
    return (values.get("threads") != 128,)


# -- timing calls of `kernelforge tune`: rotating fresh inputs of shape [m, k], at least 4x L2

def _rotating(coords: dict[str, Any], m: int, k: int, l2_bytes: int, inputs_per_call: int = 1):
    """(torch, dtype, data, scale, data shape, scale shape, global scale, number of inputs)."""
    import torch

    from kernelforge.ops import _common as c

    fmt = FORMATS[coords["format"]]
    dtype = getattr(torch, coords["dtype"])
    d_shape, s_shape = c.output_shapes(fmt, (m, k), m, coords["layout"])
    data = torch.empty(d_shape, dtype=getattr(torch, fmt.data_dtype), device="cuda")
    scale = torch.empty(s_shape, dtype=getattr(torch, fmt.scale_dtype), device="cuda")
    g = torch.ones(1, dtype=torch.float32, device="cuda") if fmt.has_global_scale else None
    per_input = m * k * dtype.itemsize * inputs_per_call
    n = max(1, min(32, math.ceil(4 * l2_bytes / per_input)))
    return torch, dtype, data, scale, d_shape, s_shape, g, n


def quantize_timing(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    torch, dtype, data, scale, _, _, g, n = _rotating(coords, m, k, l2_bytes)
    calls = []
    for _ in range(n):
        x = torch.randn(m, k, device="cuda").to(dtype)
        calls.append(lambda x=x: fn(x, data, scale, g))
    return calls


def rmsnorm_quantize_timing(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    add = coords.get("residual") == "add"
    torch, dtype, data, scale, _, _, g, n = _rotating(coords, m, k, l2_bytes, 2 if add else 1)
    calls = []
    for _ in range(n):
        x = torch.randn(m, k, device="cuda").to(dtype)
        w = torch.randn(k, device="cuda").to(dtype)
        r = torch.randn(m, k, device="cuda").to(dtype) if add else None
        calls.append(lambda x=x, r=r, w=w: fn(x, r, w, data, scale, g, 1e-6))
    return calls


def quantize_grouped_timing(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """One expert / one group of m rows (its scale rows are then those of quantize)."""
    torch, dtype, data, scale, d_shape, s_shape, g, n = _rotating(coords, m, k, l2_bytes)
    ends = torch.tensor([m], dtype=torch.int32, device="cuda")
    starts = torch.empty(1, dtype=torch.int32, device="cuda")
    calls = []
    for _ in range(n):
        x = torch.randn(m, k, device="cuda").to(dtype)
        if coords["grouping"] == "experts":
            calls.append(lambda x=x: fn(x.view(1, m, k), None, data.view(1, *d_shape), scale.view(1, *s_shape),
                                        None, g))
        else:
            calls.append(lambda x=x: fn(x, ends, data, scale, starts, g))
    return calls


_BUILDERS = "kernelforge.build.compile"

QUANTIZE = OpFamily(
    schema=schema(
        "quantize",
        ("format", "scale_mode", "layout", "dtype", "kclass", "arch"),
        ("threads", "units_per_thread"),
        (SCALE_MODE_FITS_FORMAT,),
    ),
    sources=("kernels/quantize.py",),
    builder=f"{_BUILDERS}:quantize_args",
    args=("x", "data", "scale", "global_scale"),
    heuristic=quantize_heuristic,
    timing_calls=quantize_timing,
    api=("kernelforge.ops.quantize:quantize", "kernelforge.ops.calibration:nvfp4_global_scale"),
)

# RMSNorm (optionally after a residual add) fused with rowwise quantization. The K-class is a
# hidden-size class: it bounds H and says how rows map onto threads and CTAs.
RMSNORM_QUANTIZE = OpFamily(
    schema=schema(
        "rmsnorm_quantize",
        ("format", "scale_mode", "layout", "dtype", "residual", "kclass", "arch"),
        ("elements",),
        (SCALE_MODE_FITS_FORMAT,),
        domains=(HALF_DTYPE,),
        kclass_required=("max_k",),
    ),
    sources=("kernels/dsmem.py", "kernels/rmsnorm_quantize.py"),
    builder=f"{_BUILDERS}:rmsnorm_quantize_args",
    args=("x", "residual", "weight", "data", "scale", "global_scale", "eps"),
    heuristic=rmsnorm_quantize_heuristic,
    timing_calls=rmsnorm_quantize_timing,
    api=("kernelforge.ops.rmsnorm_quantize:rmsnorm_quantize",
         "kernelforge.ops.rmsnorm_quantize:add_rmsnorm_quantize"),
)

# Rowwise quantization of every group of a grouped (mixture-of-experts) input in one launch.
QUANTIZE_GROUPED = OpFamily(
    schema=schema(
        "quantize_grouped",
        ("format", "scale_mode", "layout", "grouping", "dtype", "kclass", "arch"),
        ("threads",),
        (SCALE_MODE_FITS_FORMAT, Constraint(("grouping", "layout"), _grouping_fits_layout)),
    ),
    sources=("kernels/quantize_grouped.py",),
    builder=f"{_BUILDERS}:quantize_grouped_args",
    args=("x", "group_offsets", "data", "scale", "scale_offsets", "global_scale"),
    heuristic=quantize_grouped_heuristic,
    timing_calls=quantize_grouped_timing,
    api=("kernelforge.ops.quantize_grouped:quantize_experts", "kernelforge.ops.quantize_grouped:quantize_grouped",
         "kernelforge.ops.quantize_grouped:group_offsets_valid"),
)

# Columnwise (x.T) quantization, alone or with the rowwise output from one read of x ("dual");
# optionally of the Hadamard-transformed columns. K-classes also bound M. No tuning axes.
QUANTIZE_COLUMNWISE = OpFamily(
    schema=schema(
        "quantize_columnwise",
        ("format", "scale_mode", "layout", "dtype", "outputs", "transform", "kclass", "arch"),
        (),
        (SCALE_MODE_FITS_FORMAT, Constraint(("transform", "format", "dtype"), _rht_is_nvfp4_bf16)),
    ),
    sources=("kernels/scale_tile.py", "kernels/quantize_tiled.py"),
    builder=f"{_BUILDERS}:quantize_columnwise_args",
    args=("x", "data", "scale", "data_t", "scale_t", "global_scale_row", "global_scale_col", "sign_mask"),
    api=("kernelforge.ops.rht:quantize_nvfp4_rht", "kernelforge.ops.rht:rht_global_scale"),
)

# Swizzled -> linear rewrite of one or two block-scale matrices (as 4-byte words). Internal:
# the columnwise op's linear path at large shapes (kernelforge/staging.py decides). The
# K-class bounds the linear rows: whole 32-byte sectors, 16-byte aligned.
SCALE_LAYOUT = OpFamily(
    schema=schema("scale_layout", ("kclass", "arch"), ()),
    sources=("kernels/scale_layout.py",),
    builder=f"{_BUILDERS}:scale_layout_args",
    args=("scale", "linear_scale", "scale_t", "linear_scale_t"),
)

BUILTIN: tuple[OpFamily, ...] = (QUANTIZE, RMSNORM_QUANTIZE, QUANTIZE_GROUPED, QUANTIZE_COLUMNWISE, SCALE_LAYOUT)
