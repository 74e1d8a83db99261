"""The torch side shared by every op family: argument checks, output shapes and buffers, fakes,
the fast path, the dispatch table and the custom-op wrapper (`kernelforge.extend` is its public
face). The built-in families' public functions are `kernelforge.<name>`; they still resolve
from here for one release, with a DeprecationWarning."""
from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "set_cache_root":
        from .launch import set_cache_root

        return set_cache_root
    from ..registry import builtin_api

    module = builtin_api().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"kernelforge.ops.{name} moved to kernelforge.{name}; the old import path is removed in the next "
                  "release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), name)
