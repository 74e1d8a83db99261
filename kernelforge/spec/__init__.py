"""Spec files -> frozen variants: what kernels exist, validated against the op schemas.

Imports neither torch nor cutlass. The names load with the submodule that defines them, on first
use: the runtime imports only `spec.schema` and `spec.kclass`, never the variant records, the
selection or the TOML loader (tomllib and the spec parser, ~5 ms).
"""
from __future__ import annotations

from kernelforge.lazy import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
