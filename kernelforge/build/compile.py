"""Compile one variant with CuTe-DSL into a relocatable TVM-FFI object (no GPU, no tensors).

Each op family names an argument builder (`OpFamily.builder`, its folder's build.py): it turns
the variant's coordinates into the kernel object and fake tensors (symbolic M and K with the
K-class's divisibility and alignment, `kernelforge.kernels.fakes`) in the exact order of the
exported function's signature.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import cutlass.cute as cute

from ..registry import get_family
from .toolchain import COMPILE_OPTIONS


def __getattr__(name: str) -> Any:
    if name == "DTYPES":  # moved: kernelforge.kernels.CUTE_DTYPES (kept for one release)
        import warnings

        warnings.warn("kernelforge.build.compile.DTYPES moved to kernelforge.kernels.CUTE_DTYPES; the old import "
                      "path is removed in the next release", DeprecationWarning, stacklevel=2)
        from ..kernels import CUTE_DTYPES

        return CUTE_DTYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
