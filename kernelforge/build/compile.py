"""Compile one variant with CuTe-DSL into a relocatable TVM-FFI object (no GPU, no tensors).

Each op family names an argument builder (`OpFamily.builder`; the built-ins' are the
`*_args` functions here): it turns the variant's coordinates into the kernel object and fake
tensors (symbolic M and K with the K-class's divisibility and alignment) in the exact order
of the exported function's signature.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

from ..families import get_family
from ..formats import DTYPE_BYTES, Format, get_format
from ..kernels.quantize import QuantizeConfig, QuantizeKernel
from ..kernels.quantize_grouped import QuantizeGroupedConfig, QuantizeGroupedKernel
from ..kernels.quantize_tiled import TILE_BLOCKS, TiledQuantizeConfig, TiledQuantizeKernel
from ..kernels.rmsnorm_quantize import RMSNormQuantizeConfig, RMSNormQuantizeKernel
from ..kernels.scale_layout import CTA_WORDS, SECTOR_WORDS, ScaleUnswizzleKernel
from .toolchain import COMPILE_OPTIONS

DTYPES = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
    # Output element types: the kernels take the returned tensors' own dtypes, so the runtime
    # passes them without a (microsecond-costly) uint8 view per call.
    "float8_e4m3fn": cutlass.Float8E4M3FN,
    "float8_e8m0fnu": cutlass.Float8E8M0FNU,
    "float4_e2m1fn_x2": cutlass.Float4E2M1FNx2,
}


def _row_major(v: Any, fmt: Format, m: object, contiguous: bool) -> tuple[object, object]:
    """Fake [M, K] input: K divisible per the K-class; row stride ld (or K when contiguous)."""
    es = DTYPE_BYTES[v.dtype]
    kc = v.kclass
    k = cute.sym_int32(divisibility=fmt.block * kc.k_multiple_blocks, symbol="K")
    align = kc.vector_bytes or es
    if contiguous:
        return make_fake_compact_tensor(DTYPES[v.dtype], (m, k), stride_order=(1, 0), assumed_align=align), k
    divisibility = {"divisibility": kc.vector_bytes // es} if kc.vector_bytes else {}
    ld = cute.sym_int64(symbol="ld", **divisibility)
    return make_fake_tensor(DTYPES[v.dtype], (m, k), (ld, 1), assumed_align=align), k


def _scales(v: Any, fmt: Format, rows: object, symbols: tuple[str | None, str | None] = (None, None)) -> object:
    """Fake scale matrix: linear ones have `rows` rows (tied, checked by the wrapper), swizzled
    ones their own padded row count; `symbols` name the free dimensions."""
    rows = rows if v.layout == "linear" else cute.sym_int32(symbol=symbols[0])
    return make_fake_compact_tensor(DTYPES[fmt.scale_dtype], (rows, cute.sym_int32(symbol=symbols[1])),
                                    stride_order=(1, 0), assumed_align=4)


def _outputs(v: Any, fmt: Format, m: object) -> list[object]:
    """Fake data [M, K*bits/8], scale matrix [rows, cols], NVFP4 global scale [1] (or None).

    Linear scales have M rows, which the wrapper then checks against x; swizzled ones have
    M rounded up to 128.
    """
    out_bytes = fmt.block * fmt.element_bits // 8
    dq = cute.sym_int32(divisibility=out_bytes * v.kclass.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(DTYPES[fmt.data_dtype], (m, dq), stride_order=(1, 0), assumed_align=16)
    s = _scales(v, fmt, m, ("SR", "SC"))
    g = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) if fmt.has_global_scale else None
    return [q, s, g]


def quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    m = cute.sym_int32(symbol="M")
    x, _ = _row_major(v, fmt, m, contiguous=False)
    kernel = QuantizeKernel(QuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode,
        threads=int(v.threads), units_per_thread=int(v.units_per_thread)))
    return kernel, [x, *_outputs(v, fmt, m), make_fake_stream(use_tvm_ffi_env_stream=True)]


def rmsnorm_quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    kc = v.kclass
    m = cute.sym_int32(symbol="M")
    x, k = _row_major(v, fmt, m, contiguous=True)
    add = v.residual == "add"
    r = make_fake_compact_tensor(DTYPES[v.dtype], (m, k), stride_order=(1, 0),
                                 assumed_align=kc.vector_bytes) if add else None
    w = make_fake_compact_tensor(DTYPES[v.dtype], (k,), assumed_align=kc.vector_bytes)
    kernel = RMSNormQuantizeKernel(RMSNormQuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode, add_residual=add,
        max_k=kc.max_k, units=int(v.elements) // fmt.block, cluster=kc.cluster))
    q, s, g = _outputs(v, fmt, m)
    return kernel, [x, r, w, q, s, g, cutlass.Float32(1e-6), make_fake_stream(use_tvm_ffi_env_stream=True)]


def quantize_columnwise_args(v: Any) -> tuple[object, list[object]]:
    """x [M, K] (M a multiple of B, or of the K-class's m_multiple; K any for columnwise only),
    rowwise data/scales (dual only), columnwise data [K, M*bits/8] and scales, the two NVFP4
    global scales, the RHT sign mask."""
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
    x = make_fake_tensor(DTYPES[v.dtype], (m, k), (ld, 1), assumed_align=kc.vector_bytes or es)
    q = s = None
    if dual:
        dq = cute.sym_int32(divisibility=out_bytes * kc.k_multiple_blocks, symbol="KQ")
        q = make_fake_compact_tensor(DTYPES[fmt.data_dtype], (m, dq), stride_order=(1, 0), assumed_align=16)
        s = _scales(v, fmt, m)
    mq = cute.sym_int32(divisibility=out_bytes * (m_div // fmt.block), symbol="MQ")
    qt = make_fake_compact_tensor(DTYPES[fmt.data_dtype], (k, mq), stride_order=(1, 0),
                                  assumed_align=16 if kc.m_multiple else min(16, out_bytes))
    st = _scales(v, fmt, k)
    g = [make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) if fmt.has_global_scale else None
         for _ in range(2)]
    kernel = TiledQuantizeKernel(TiledQuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode, rowwise=dual, rht=v.transform == "rht",
        exact_tiles=kc.m_multiple > 0 and kc.k_multiple_blocks % TILE_BLOCKS == 0 and kc.vector_bytes == 16))
    return kernel, [x, q, s, qt, st, *g, cutlass.Int32(0), make_fake_stream(use_tvm_ffi_env_stream=True)]


def quantize_grouped_args(v: Any) -> tuple[object, list[object]]:
    """experts: w [E, N, K] contiguous, data [E, N, K*bits/8], scales [E, N, K/B] or [E, SR, SC];
    offsets: x [T, K] (row stride ld), group_offsets [G] int32, data [T, K*bits/8], scales
    [SR, SC], scale_offsets [G] int32. NVFP4: global scales [1] or one per expert / group."""
    fmt = get_format(v.format)
    kc = v.kclass
    kernel = QuantizeGroupedKernel(QuantizeGroupedConfig(
        fmt=fmt, grouping=v.grouping, layout=v.layout, scale_mode=v.scale_mode, threads=int(v.threads)))
    g = (make_fake_compact_tensor(cutlass.Float32, (cute.sym_int32(symbol="NG"),), assumed_align=4)
         if fmt.has_global_scale else None)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    if v.grouping == "offsets":
        t = cute.sym_int32(symbol="T")
        x, _ = _row_major(v, fmt, t, contiguous=False)
        q, s, _ = _outputs(v, fmt, t)
        groups = cute.sym_int32(symbol="G")
        offsets, scale_offsets = (make_fake_compact_tensor(cutlass.Int32, (groups,), assumed_align=4)
                                  for _ in range(2))
        return kernel, [x, offsets, q, s, scale_offsets, g, stream]
    e, n = cute.sym_int32(symbol="E"), cute.sym_int32(symbol="N")
    k = cute.sym_int32(divisibility=fmt.block * kc.k_multiple_blocks, symbol="K")
    x = make_fake_compact_tensor(DTYPES[v.dtype], (e, n, k), stride_order=(2, 1, 0),
                                 assumed_align=kc.vector_bytes or DTYPE_BYTES[v.dtype])
    dq = cute.sym_int32(divisibility=fmt.block * fmt.element_bits // 8 * kc.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(DTYPES[fmt.data_dtype], (e, n, dq), stride_order=(2, 1, 0), assumed_align=16)
    rows = n if v.layout == "linear" else cute.sym_int32(symbol="SR")
    s = make_fake_compact_tensor(DTYPES[fmt.scale_dtype], (e, rows, cute.sym_int32(symbol="SC")),
                                 stride_order=(2, 1, 0), assumed_align=4)
    return kernel, [x, None, q, s, None, g, stream]


def scale_layout_args(v: Any) -> tuple[object, list[object]]:
    """Two (swizzled, linear) scale pairs as int32 words: swizzled scales flat [Mp * Np / 4],
    linear [M, Np / 4] with Np / 4 a multiple of 8 and 16-byte aligned rows (the K-class); a
    second pair of zero rows stands for none."""
    pairs = []
    for suffix in ("", "T"):
        src = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int32(divisibility=CTA_WORDS, symbol="S" + suffix),),
                                       assumed_align=16)
        words = cute.sym_int32(divisibility=SECTOR_WORDS, symbol="W" + suffix)
        dst = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int32(symbol="M" + suffix), words),
                                       stride_order=(1, 0), assumed_align=v.kclass.vector_bytes)
        pairs += [src, dst]
    return ScaleUnswizzleKernel(), [*pairs, make_fake_stream(use_tvm_ffi_env_stream=True)]


def compile_variant(v: Any, object_path: Path) -> None:
    """Compile variant `v` for its arch and write a relocatable object exporting `v.symbol`.

    The argument builder is the one `v`'s op family names (`OpFamily.builder`); its fake
    arguments must match the family's declared signature (`OpFamily.args`)."""
    family = get_family(v.op)
    kernel, args = family.load_builder()(v)
    family.check_fake_args(args)
    options = f"{COMPILE_OPTIONS} --gpu-arch {v.arch}"
    compiled = cute.compile(kernel, *args, options=options)
    compiled.export_to_c(str(object_path), function_name=v.symbol, export_only_tvm_ffi_symbols=True)
