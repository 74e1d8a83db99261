"""The builder of `quantize_columnwise`: a variant -> (kernel, fake arguments) in the order of
the exported function; build time only.

x [M, K] (M a multiple of B, or of the K-class's m_multiple; K any for columnwise only),
rowwise data/scales (dual only), columnwise data [K, M*bits/8] and scales, the two NVFP4
global scales, the RHT sign mask.
"""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

from kernelforge.formats import DTYPE_BYTES, get_format
from kernelforge.kernels import CUTE_DTYPES, fake_global_scale, fake_scales, fake_stream

from .kernel import TILE_BLOCKS, TiledQuantizeConfig, TiledQuantizeKernel


def quantize_columnwise_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    kc = v.kclass
    es = DTYPE_BYTES[v.dtype]
    dual = v.outputs == "dual"
    out_bytes = fmt.block * fmt.element_bits // 8
    m_div = kc.m_multiple or fmt.block
    m = cute.sym_int32(divisibility=m_div, symbol="M")
    k_div = fmt.block * kc.k_multiple_blocks if (dual or kc.k_multiple_blocks > 1) else 1
    k = cute.sym_int32(divisibility=k_div, symbol="K")
    ld = cute.sym_int64(symbol="ld", **({"divisibility": kc.vector_bytes // es} if kc.vector_bytes else {}))
    x = make_fake_tensor(CUTE_DTYPES[v.dtype], (m, k), (ld, 1), assumed_align=kc.vector_bytes or es)
    q = s = None
    if dual:
        dq = cute.sym_int32(divisibility=out_bytes * kc.k_multiple_blocks, symbol="KQ")
        q = make_fake_compact_tensor(CUTE_DTYPES[fmt.data_dtype], (m, dq), stride_order=(1, 0), assumed_align=16)
        s = fake_scales(v, fmt, m)
    mq = cute.sym_int32(divisibility=out_bytes * (m_div // fmt.block), symbol="MQ")
    qt = make_fake_compact_tensor(CUTE_DTYPES[fmt.data_dtype], (k, mq), stride_order=(1, 0),
                                  assumed_align=16 if kc.m_multiple else min(16, out_bytes))
    st = fake_scales(v, fmt, k)
    g = [fake_global_scale(fmt) for _ in range(2)]
    kernel = TiledQuantizeKernel(TiledQuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode, rowwise=dual, rht=v.transform == "rht",
        exact_tiles=kc.m_multiple > 0 and kc.k_multiple_blocks % TILE_BLOCKS == 0 and kc.vector_bytes == 16))
    return kernel, [x, q, s, qt, st, *g, cutlass.Int32(0), fake_stream()]
