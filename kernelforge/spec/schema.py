"""Moved: the schema types are in `kernelforge.schema` (a leaf), the schema view in
`kernelforge.registry` (OP_SCHEMAS). This module keeps the old import path for one release."""
from kernelforge.lazy import moved_exports

__getattr__, __dir__ = moved_exports(__name__, {
    **{name: "kernelforge.schema" for name in (
        "ARCHES", "ARCH_CAPABILITY", "SCHEMA_VERSIONS", "Axis", "Constraint", "OpSchema", "Value", "arch_runs_on")},
    "OP_SCHEMAS": "kernelforge.registry",
})
