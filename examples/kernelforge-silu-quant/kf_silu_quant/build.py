"""CuTe-DSL argument builder of `silu_mul_quantize` (imported at build time only: it imports cutlass).

`silu_mul_quantize_args(variant)` returns the kernel object and fake arguments in the family's
`args` order (x, data, scale, global_scale) plus the TVM-FFI environment stream, as the
built-in builders (`kernelforge/families/<name>/build.py`) do:
* x [M, 2N] (bf16/fp16), row stride ld; 2N divisible by 2 * B * k_multiple_blocks (so N by
  B * k_multiple_blocks, the K-class's rule on N, the K the runtime dispatches on); with a
  `vector_bytes` K-class, ld and the pointer are aligned to it.
* data [M, N * bits / 8] contiguous, 16-byte aligned; scales [M, N/B] (linear, M tied to x) or
  [SR, SC] (swizzled); NVFP4's fp32 global scale [1] (None for MX formats).
"""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

from kernelforge.formats import DTYPE_BYTES, get_format
from kernelforge.kernels import CUTE_DTYPES as DTYPES
from kernelforge.kernels import fake_stream

from .kernel import SiluMulQuantizeConfig, SiluMulQuantizeKernel


def silu_mul_quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    kc = v.kclass
    es = DTYPE_BYTES[v.dtype]
    m = cute.sym_int32(symbol="M")
    k2 = cute.sym_int32(divisibility=2 * fmt.block * kc.k_multiple_blocks, symbol="K2")
    align = kc.vector_bytes or es
    ld = cute.sym_int64(symbol="ld", **({"divisibility": kc.vector_bytes // es} if kc.vector_bytes else {}))
    x = make_fake_tensor(DTYPES[v.dtype], (m, k2), (ld, 1), assumed_align=align)
    out_bytes = fmt.block * fmt.element_bits // 8
    dq = cute.sym_int32(divisibility=out_bytes * kc.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(DTYPES[fmt.data_dtype], (m, dq), stride_order=(1, 0), assumed_align=16)
    rows = m if v.layout == "linear" else cute.sym_int32(symbol="SR")
    s = make_fake_compact_tensor(DTYPES[fmt.scale_dtype], (rows, cute.sym_int32(symbol="SC")),
                                 stride_order=(1, 0), assumed_align=4)
    g = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) if fmt.has_global_scale else None
    kernel = SiluMulQuantizeKernel(SiluMulQuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode, threads=int(v.threads)))
    return kernel, [x, q, s, g, fake_stream()]
