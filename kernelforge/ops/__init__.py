"""The public torch-facing ops of the built-in op families; importing this registers them as
`torch.ops.kernelforge.*` (each op module registers its own, next to its eager function)."""
from __future__ import annotations

import importlib

from ..families import builtin_families
from ._common import set_cache_root  # noqa: F401  (in __all__ below)


def _export() -> list[str]:
    names = ["set_cache_root"]
    for fam in builtin_families().values():
        for name, module in fam.public_names().items():
            globals()[name] = getattr(importlib.import_module(module), name)
            names.append(name)
    return names


__all__ = _export()
