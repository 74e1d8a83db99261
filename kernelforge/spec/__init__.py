"""Spec files -> frozen variants: what kernels exist, validated against the op schemas.

Imports neither torch nor cutlass. The names load with the submodule that defines them, on first
use: the runtime imports only `spec.kclass`, never the variant records, the selection or the
TOML loader. The schema types live in the leaf `kernelforge.schema`.
"""
from __future__ import annotations

from kernelforge.lazy import lazy_exports

# Public name -> the submodule that defines it.
_NAMES = {
    "ARCHES": "kernelforge.schema",
    "ARCH_CAPABILITY": "kernelforge.schema",
    "OP_SCHEMAS": "kernelforge.registry",
    "Axis": "kernelforge.schema",
    "Constraint": "kernelforge.schema",
    "OpSchema": "kernelforge.schema",
    "arch_runs_on": "kernelforge.schema",
    "resolve_spec_paths": "files",
    "KClass": "kclass",
    "Spec": "model",
    "Variant": "model",
    "select": "select",
    "load_spec": "loader",
    "load_specs": "loader",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
