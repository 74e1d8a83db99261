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
    (PYTHONPATH=examples/kernelforge-silu-quant), it has no entry point: this writes the
    package's distribution metadata (its name and version, which are part of every cache key,
    so a cache built from the installed package is served) into a private directory, puts that
    on sys.path and rescans the plugins. kernelforge has no call to register a family directly.
    """
    import sys
    import tempfile

    from kernelforge.families import ENTRY_POINT_GROUP, find_family, reload_plugins

    from . import __version__

    fam = find_family(OP)
    if fam is not None:
        return fam
    site = Path(tempfile.mkdtemp(prefix="kf-silu-quant-dist-"))
    info = site / f"{DISTRIBUTION.replace('-', '_')}-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {__version__}\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT}\n")
    sys.path.append(str(site))
    reload_plugins()
    fam = find_family(OP)
    if fam is None:
        raise RuntimeError(f"kf_silu_quant: could not register the {OP!r} op family")
    return fam
