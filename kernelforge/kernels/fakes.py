"""Fake arguments for a family's builder: symbolic-shape tensors in the layouts the built-in
quantizing kernels take, so `cute.compile` needs no GPU and no real tensor (build time only).

The shapes carry the K-class's rules: K divisible by the block size times `k_multiple_blocks`,
and with `vector_bytes` the pointer and row stride aligned to it.
"""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

from ..formats import DTYPE_BYTES, Format

CUTE_DTYPES = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
    # Output element types: the kernels take the returned tensors' own dtypes, so the runtime
    # passes them without a uint8 view per call.
    "float8_e4m3fn": cutlass.Float8E4M3FN,
    "float8_e8m0fnu": cutlass.Float8E8M0FNU,
    "float4_e2m1fn_x2": cutlass.Float4E2M1FNx2,
}


def fake_stream() -> object:
    """The trailing CUDA stream argument: the caller's current stream, from the TVM-FFI environment."""
    return make_fake_stream(use_tvm_ffi_env_stream=True)


def fake_rows(v: Any, fmt: Format, m: object, contiguous: bool) -> tuple[object, object]:
    """Fake [M, K] input of dtype `v.dtype` and its K: K divisible per the K-class; row stride
    ld (or K when contiguous)."""
    es = DTYPE_BYTES[v.dtype]
    kc = v.kclass
    k = cute.sym_int32(divisibility=fmt.block * kc.k_multiple_blocks, symbol="K")
    align = kc.vector_bytes or es
    if contiguous:
        return make_fake_compact_tensor(CUTE_DTYPES[v.dtype], (m, k), stride_order=(1, 0), assumed_align=align), k
    divisibility = {"divisibility": kc.vector_bytes // es} if kc.vector_bytes else {}
    ld = cute.sym_int64(symbol="ld", **divisibility)
    return make_fake_tensor(CUTE_DTYPES[v.dtype], (m, k), (ld, 1), assumed_align=align), k


def fake_scales(v: Any, fmt: Format, rows: object, symbols: tuple[str | None, str | None] = (None, None)) -> object:
    """Fake scale matrix: linear ones have `rows` rows (tied, checked by the op), swizzled ones
    their own padded row count; `symbols` name the free dimensions."""
    rows = rows if v.layout == "linear" else cute.sym_int32(symbol=symbols[0])
    return make_fake_compact_tensor(CUTE_DTYPES[fmt.scale_dtype], (rows, cute.sym_int32(symbol=symbols[1])),
                                    stride_order=(1, 0), assumed_align=4)


def fake_global_scale(fmt: Format) -> object | None:
    """NVFP4's fp32 global scale [1]; None for the MX formats."""
    return make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) if fmt.has_global_scale else None


def fake_outputs(v: Any, fmt: Format, m: object) -> list[object]:
    """Fake data [M, K*bits/8], scale matrix [rows, cols], NVFP4 global scale [1] (or None).

    Linear scales have M rows, which the op then checks against x; swizzled ones have M
    rounded up to 128.
    """
    out_bytes = fmt.block * fmt.element_bits // 8
    dq = cute.sym_int32(divisibility=out_bytes * v.kclass.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(CUTE_DTYPES[fmt.data_dtype], (m, dq), stride_order=(1, 0), assumed_align=16)
    return [q, fake_scales(v, fmt, m, ("SR", "SC")), fake_global_scale(fmt)]
