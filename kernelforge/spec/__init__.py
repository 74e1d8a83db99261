"""Spec files -> frozen variants: what kernels exist, validated against the op schemas.

Imports neither torch nor cutlass.
"""
from typing import Any

from kernelforge.spec.model import KClass, Spec, Variant
from kernelforge.spec.schema import (
    ARCH_CAPABILITY,
    ARCHES,
    OP_SCHEMAS,
    Axis,
    Constraint,
    OpSchema,
    arch_runs_on,
)
from kernelforge.spec.select import select

__all__ = [
    "ARCHES",
    "ARCH_CAPABILITY",
    "OP_SCHEMAS",
    "Axis",
    "Constraint",
    "KClass",
    "OpSchema",
    "Spec",
    "Variant",
    "arch_runs_on",
    "load_spec",
    "load_specs",
    "select",
]


def __getattr__(name: str) -> Any:
    # The TOML loader (tomllib and the spec parser, ~5 ms) loads on first use: the runtime
    # imports this package for the schemas and K-classes only, and reads no spec file.
    if name in ("load_spec", "load_specs"):
        from kernelforge.spec import loader

        value = getattr(loader, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

