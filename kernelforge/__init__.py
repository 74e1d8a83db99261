"""kernelforge: prebuilt CuTe-DSL quantization kernels from a versioned on-disk cache.

`import kernelforge` is cheap and has no side effects: the ops (and torch) load on first
attribute access, the cache index on the first kernel call. CuTe-DSL is never imported.
The public ops are those the built-in op families list in their `api`
(`kernelforge/families/<name>/family.py`), plus `set_cache_root`.
"""
from __future__ import annotations

import functools
from typing import Any

__version__ = "0.1.0"


@functools.lru_cache(maxsize=1)
def _public() -> dict[str, str]:
    """Public name -> defining module, from the built-in op families."""
    from kernelforge.registry import builtin_api

    return {"set_cache_root": "kernelforge.ops.launch", **builtin_api()}


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return ["__version__", *_public()]
    module = _public().get(name) if not name.startswith("__") else None
    if module is None:
        raise AttributeError(f"module 'kernelforge' has no attribute {name!r}")
    import importlib

    for public in set(_public().values()):  # registers every built-in torch.library op first
        importlib.import_module(public)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(["__version__", *_public()])
