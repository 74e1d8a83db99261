"""The builder of `quantize_grouped`: a variant -> (kernel, fake arguments) in the order of the
exported function (x, group_offsets, data, scale, scale_offsets, global_scale, stream); build time only.

experts: w [E, N, K] contiguous, data [E, N, K*bits/8], scales [E, N, K/B] or [E, SR, SC];
offsets: x [T, K] (row stride ld), group_offsets [G] int32, data [T, K*bits/8], scales
[SR, SC], scale_offsets [G] int32. NVFP4: global scales [1] or one per expert / group.
"""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

from kernelforge.formats import DTYPE_BYTES, get_format
from kernelforge.kernels import CUTE_DTYPES, fake_outputs, fake_rows, fake_stream

from .kernel import QuantizeGroupedConfig, QuantizeGroupedKernel


def quantize_grouped_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    kc = v.kclass
    kernel = QuantizeGroupedKernel(QuantizeGroupedConfig(
        fmt=fmt, grouping=v.grouping, layout=v.layout, scale_mode=v.scale_mode, threads=int(v.threads)))
    g = (make_fake_compact_tensor(cutlass.Float32, (cute.sym_int32(symbol="NG"),), assumed_align=4)
         if fmt.has_global_scale else None)
    stream = fake_stream()
    if v.grouping == "offsets":
        t = cute.sym_int32(symbol="T")
        x, _ = fake_rows(v, fmt, t, contiguous=False)
        q, s, _ = fake_outputs(v, fmt, t)
        groups = cute.sym_int32(symbol="G")
        offsets, scale_offsets = (make_fake_compact_tensor(cutlass.Int32, (groups,), assumed_align=4)
                                  for _ in range(2))
        return kernel, [x, offsets, q, s, scale_offsets, g, stream]
    e, n = cute.sym_int32(symbol="E"), cute.sym_int32(symbol="N")
    k = cute.sym_int32(divisibility=fmt.block * kc.k_multiple_blocks, symbol="K")
    x = make_fake_compact_tensor(CUTE_DTYPES[v.dtype], (e, n, k), stride_order=(2, 1, 0),
                                 assumed_align=kc.vector_bytes or DTYPE_BYTES[v.dtype])
    dq = cute.sym_int32(divisibility=fmt.block * fmt.element_bits // 8 * kc.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(CUTE_DTYPES[fmt.data_dtype], (e, n, dq), stride_order=(2, 1, 0), assumed_align=16)
    rows = n if v.layout == "linear" else cute.sym_int32(symbol="SR")
    s = make_fake_compact_tensor(CUTE_DTYPES[fmt.scale_dtype], (e, rows, cute.sym_int32(symbol="SC")),
                                 stride_order=(2, 1, 0), assumed_align=4)
    return kernel, [x, None, q, s, None, g, stream]
