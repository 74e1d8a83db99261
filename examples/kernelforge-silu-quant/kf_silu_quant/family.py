"""The `silu_mul_quantize` op family (imports neither torch nor cutlass).

Declared to kernelforge through the entry point `kernelforge.ops` (pyproject.toml); see
kernelforge's README, "Writing a kernel family".
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelforge.families import OpFamily
from kernelforge.families.builtin import HALF_DTYPE, SCALE_MODE_FITS_FORMAT, schema
from kernelforge.spec.schema import Axis

OP = "silu_mul_quantize"
HERE = Path(__file__).resolve().parent
SPEC_FILE = HERE / "data" / "specs" / "silu_mul_quantize.toml"
FORMATS = ("mxfp8", "nvfp4")  # the kernel is exact for mxfp4 as well; not offered (not tested)


def heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA first (as the rowwise quantize kernel)."""
    return (values.get("threads") != 128, values.get("threads") or 0)


def timing_calls(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """What `kernelforge tune` times: fresh [m, 2k] inputs rotated beyond 4x L2 (k = N)."""
    import torch

    from kernelforge.formats import get_format
    from kernelforge.ops import _common as c

    fmt = get_format(coords["format"])
    dtype = getattr(torch, coords["dtype"])
    d_shape, s_shape = c.output_shapes(fmt, (m, k), m, coords["layout"])
    data = torch.empty(d_shape, dtype=getattr(torch, fmt.data_dtype), device="cuda")
    scale = torch.empty(s_shape, dtype=getattr(torch, fmt.scale_dtype), device="cuda")
    g = torch.ones(1, dtype=torch.float32, device="cuda") if fmt.has_global_scale else None
    n = max(1, min(32, math.ceil(4 * l2_bytes / (m * 2 * k * dtype.itemsize))))
    xs = [torch.randn(m, 2 * k, device="cuda").to(dtype) for _ in range(n)]
    return [lambda x=x: fn(x, data, scale, g) for x in xs]


FAMILY = OpFamily(
    schema=schema(
        OP,
        ("format", "scale_mode", "layout", "dtype", "kclass", "arch"),
        ("threads",),
        (SCALE_MODE_FITS_FORMAT,),
        domains=(HALF_DTYPE, Axis("format", str, choices=FORMATS)),
    ),
    sources=("kernel.py", "build.py", "family.py"),
    source_root=HERE,
    builder="kf_silu_quant.build:silu_mul_quantize_args",
    args=("x", "data", "scale", "global_scale"),
    heuristic=heuristic,
    timing_calls=timing_calls,
    spec_files=(SPEC_FILE,),
)

DISTRIBUTION = "kernelforge-silu-quant"
ENTRY_POINT = f"{OP} = kf_silu_quant.family:FAMILY"


def ensure_registered() -> OpFamily:
    """The family as kernelforge's registry serves it, declaring it first where needed.

    Installed (`pip install -e`), the package's entry point declares it. Importable only
    (PYTHONPATH=examples/kernelforge-silu-quant), it has no entry point: it is registered
    from code under the package's distribution name and version, which are part of every
    cache key, so a cache built from the installed package is served.
    """
    from kernelforge.families import find_family, register

    from . import __version__

    fam = find_family(OP)
    if fam is not None:
        return fam
    return register(FAMILY, distribution=DISTRIBUTION, version=__version__)
