"""Packages whose public names load with the submodule that defines them, on first use (PEP 562)."""
from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose name `n` is `exports[n]`'s attribute
    `n` (a submodule name relative to the package, or an absolute `kernelforge.` module); each is
    imported once, then kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_absolute(package, module)), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


def _absolute(package: str, module: str) -> str:
    return module if module.startswith("kernelforge.") or module == "kernelforge" else f"{package}.{module}"


def moved_exports(package: str, moved: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a module whose names moved: name -> the module that now
    defines it. Each access warns (DeprecationWarning, naming the new place) and returns the
    object itself, so old imports keep working for one release. Nothing is cached, so every
    use of the old path warns."""

    def __getattr__(name: str) -> Any:
        module = moved.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} moved to {module}.{name}; the old import path is removed in the next "
                      "release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(moved)

    return __getattr__, __dir__
