"""The `silu_mul_quantize` op family (imports neither torch nor cutlass).

Declared to kernelforge through the entry point `kernelforge.ops` (pyproject.toml); see
kernelforge's README, "Writing a kernel family".
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelforge.registry import OpFamily
from kernelforge.schema import HALF_DTYPE, SCALE_MODE_FITS_FORMAT, Axis, op_schema

OP = "silu_mul_quantize"
HERE = Path(__file__).resolve().parent
SPEC_FILE = HERE / "data" / "specs" / "silu_mul_quantize.toml"
FORMATS = ("mxfp8", "nvfp4")  # the kernel is exact for mxfp4 as well; not offered (not tested)
THREADS = Axis("threads", int, check=lambda v: 32 <= v <= 1024 and v % 32 == 0,
               expected="a multiple of 32 in 32..1024", abbrev="t")


def heuristic(max_k: int, values: Mapping[str, Any]) -> tuple:
    """128 threads per CTA first (as the rowwise quantize kernel)."""
    return (values.get("threads") != 128, values.get("threads") or 0)


def timing_calls(coords: dict[str, Any], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """What `kernelforge tune` times: fresh [m, 2k] inputs rotated beyond 4x L2 (k = N)."""
    from kernelforge.testing import rotating_inputs

    r = rotating_inputs(coords, m, k, l2_bytes, row_elements=2 * k)
    return [lambda x=x: fn(x, r.data, r.scale, r.global_scale) for x in r.inputs()]


FAMILY = OpFamily(
    schema=op_schema(
        OP,
        (Axis("format", str, choices=FORMATS), "scale_mode", "layout", HALF_DTYPE, "kclass", "arch"),
        (THREADS,),
        (SCALE_MODE_FITS_FORMAT,),
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
    from kernelforge.registry import find_family, register

    from . import __version__

    fam = find_family(OP)
    if fam is not None:
        return fam
    return register(FAMILY, distribution=DISTRIBUTION, version=__version__)
