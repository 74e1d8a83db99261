"""Compile one variant with CuTe-DSL into a relocatable TVM-FFI object (no GPU, no tensors)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

from ..formats import get_format
from ..kernels.quantize import QuantizeConfig, QuantizeKernel
from .toolchain import COMPILE_OPTIONS


DTYPES = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    es = DTYPE_BYTES[v.dtype]
    kc = v.kclass
    m = cute.sym_int32(symbol="M")
    k = cute.sym_int32(divisibility=fmt.block * kc.k_multiple_blocks, symbol="K")
    if kc.vector_bytes:
        ld = cute.sym_int64(divisibility=kc.vector_bytes // es, symbol="ld")
        align = kc.vector_bytes
    else:
        ld = cute.sym_int64(symbol="ld")
        align = es
    x = make_fake_tensor(DTYPES[v.dtype], (m, k), (ld, 1), assumed_align=align)
    out_bytes = fmt.block * fmt.element_bits // 8
    dq = cute.sym_int32(divisibility=out_bytes * kc.k_multiple_blocks, symbol="KQ")
    q = make_fake_compact_tensor(cutlass.Uint8, (m, dq), stride_order=(1, 0), assumed_align=16)
    s = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int32(symbol="S"),), assumed_align=4)
    g = make_fake_compact_tensor(cutlass.Float32, (1,), assumed_align=4) if fmt.has_global_scale else None
    kernel = QuantizeKernel(
        QuantizeConfig(
            fmt=fmt,
            layout=v.layout,
            scale_mode=v.scale_mode,
            threads=int(v.threads),
            units_per_thread=int(v.units_per_thread),
        )
    )
    return kernel, [x, q, s, g, make_fake_stream(use_tvm_ffi_env_stream=True)]


OP_BUILDERS = {"quantize": _quantize_args}


def compile_variant(v: Any, object_path: Path) -> None:
    """Compile variant `v` for its arch and write a relocatable object exporting `v.symbol`."""
    kernel, args = OP_BUILDERS[v.op](v)
    options = f"{COMPILE_OPTIONS} --gpu-arch {v.arch}"
    compiled = cute.compile(kernel, *args, options=options)
    compiled.export_to_c(str(object_path), function_name=v.symbol, export_only_tvm_ffi_symbols=True)
