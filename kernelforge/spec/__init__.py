"""Spec files -> frozen variants: what kernels exist, validated against the op schemas.

Imports neither torch nor cutlass.
"""
from kernelforge.spec.loader import load_spec, load_specs
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
