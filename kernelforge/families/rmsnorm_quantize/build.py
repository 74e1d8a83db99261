"""The builder of `rmsnorm_quantize`: a variant -> (kernel, fake arguments) in the order of the
exported function (x, residual, weight, data, scale, global_scale, eps, stream); build time only."""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

from kernelforge.formats import get_format
from kernelforge.kernels import CUTE_DTYPES, fake_outputs, fake_rows, fake_stream

from .kernel import RMSNormQuantizeConfig, RMSNormQuantizeKernel


def rmsnorm_quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    kc = v.kclass
    m = cute.sym_int32(symbol="M")
    x, k = fake_rows(v, fmt, m, contiguous=True)
    add = v.residual == "add"
    r = make_fake_compact_tensor(CUTE_DTYPES[v.dtype], (m, k), stride_order=(1, 0),
                                 assumed_align=kc.vector_bytes) if add else None
    w = make_fake_compact_tensor(CUTE_DTYPES[v.dtype], (k,), assumed_align=kc.vector_bytes)
    if kc.cluster != 1:
        # One source of the CTAs per row: the tuning axis, so that the tuner can choose it.
        raise ValueError(f"K-class {kc.name!r}: rmsnorm_quantize takes the CTAs per row from the "
                         f"ctas_per_row axis, not from the K-class's cluster (got cluster = {kc.cluster})")
    kernel = RMSNormQuantizeKernel(RMSNormQuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode, add_residual=add,
        max_k=kc.max_k, units=int(v.elements) // fmt.block, cluster=int(v.ctas_per_row)))
    q, s, g = fake_outputs(v, fmt, m)
    return kernel, [x, r, w, q, s, g, cutlass.Float32(1e-6), fake_stream()]
