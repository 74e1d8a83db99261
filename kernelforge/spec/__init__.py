"""Spec files -> frozen variants: what kernels exist, validated against the op schemas.

Imports neither torch nor cutlass. The names load with the submodule that defines them, on first
use: the runtime imports only `spec.schema` and `spec.kclass`, never the variant records, the
selection or the TOML loader (tomllib and the spec parser, ~5 ms).
"""
from __future__ import annotations

import importlib
from typing import Any

# Public name -> the submodule that defines it.
_NAMES = {
    "ARCHES": "schema",
    "ARCH_CAPABILITY": "schema",
    "OP_SCHEMAS": "schema",
    "Axis": "schema",
    "Constraint": "schema",
    "OpSchema": "schema",
    "arch_runs_on": "schema",
    "KClass": "kclass",
    "Spec": "model",
    "Variant": "model",
    "select": "select",
    "load_spec": "loader",
    "load_specs": "loader",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_NAMES])
