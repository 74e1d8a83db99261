"""The public torch-facing ops of the built-in op families; importing this registers them as
`torch.ops.kernelforge.*` (each op module registers its own, next to its eager function)."""
from __future__ import annotations

import importlib

from ..families import builtin_api
from ._common import set_cache_root  # noqa: F401  (in __all__ below)


def _export() -> list[str]:
    for name, module in builtin_api().items():
        globals()[name] = getattr(importlib.import_module(module), name)
    return ["set_cache_root", *builtin_api()]


__all__ = _export()
