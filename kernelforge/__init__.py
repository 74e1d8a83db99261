"""kernelforge: prebuilt CuTe-DSL quantization kernels from a versioned on-disk cache.

`import kernelforge` is cheap and has no side effects: the ops (and torch) load on first
attribute access, the cache index on the first kernel call. CuTe-DSL is never imported.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Public names, all from kernelforge.ops (whose import also installs torch.ops.kernelforge).
_LAZY = {
    name: "kernelforge.ops"
    for name in ("quantize", "rmsnorm_quantize", "add_rmsnorm_quantize", "nvfp4_global_scale", "set_cache_root",
                 "quantize_nvfp4_rht", "rht_global_scale", "quantize_experts", "quantize_grouped")
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelforge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
