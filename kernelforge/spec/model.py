"""Frozen records a spec enumerates: variants and the parsed spec file (K-classes: `kclass`)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kernelforge.registry import OP_SCHEMAS
from kernelforge.schema import OpSchema, Value
from kernelforge.spec.kclass import (  # noqa: F401  (re-exported: the spec model's names)
    KCLASS_FIELDS,
    KCLASS_NAME,
    KCLASS_OPTIONAL,
    VECTOR_BYTES,
    KClass,
    kclass_problem,
)


@dataclass(frozen=True)
class Variant:
    """One point of an op's product: a kernel that is compiled and dispatched on its own.

    `coords` holds every axis of the op's schema in schema order (dispatch, then tuning);
    the kclass coordinate is the K-class's name and `kclass` its parameters. Coordinates
    read as attributes (`v.format`, `v.threads`) or with `v.get(axis)`.
    """

    op: str
    coords: tuple[tuple[str, Value], ...]
    kclass: KClass
    spec_file: str = field(default="", compare=False)

    def __getattr__(self, name: str) -> Value:
        # Dunder/private lookups (copy, pickle) must not reach `coords`, which may not exist yet.
        if name.startswith("_") or name == "coords":
            raise AttributeError(name)
        for axis, value in self.coords:
            if axis == name:
                return value
        raise AttributeError(f"{type(self).__name__} of op {self.op!r} has no axis {name!r}")

    def get(self, axis: str) -> Value:
        """The value of `axis`; KeyError naming the known axes if the op has no such axis."""
        for a, value in self.coords:
            if a == axis:
                return value
        raise KeyError(f"op {self.op!r} has no axis {axis!r}; axes: {[a for a, _ in self.coords]}")

    @property
    def schema(self) -> OpSchema:
        return OP_SCHEMAS[self.op]

    @property
    def name(self) -> str:
        """Stable id: `op.<dispatch values, schema order>.<tuning abbrev+value, schema order>`.

        e.g. `quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1`; the last segment
        is left out for an op without tuning axes.
        """
        s = self.schema
        values = dict(self.coords)
        parts = [self.op, *(str(values[a]) for a in s.dispatch_axes)]
        if s.tuning_axes:
            parts.append("".join(f"{s.domains[a].abbrev}{values[a]}" for a in s.tuning_axes))
        return ".".join(parts)

    @property
    def symbol(self) -> str:
        """C identifier of the exported function: `kf_` + the name, other characters as `_`."""
        return "kf_" + re.sub(r"[^A-Za-z0-9_]", "_", self.name)

    @property
    def dispatch_key(self) -> tuple[Value, ...]:
        """Runtime lookup key: (op, dispatch values in schema order); kclass by name."""
        return self.schema.dispatch_key(dict(self.coords))

    def canonical(self) -> dict[str, Any]:
        """Complete, stable JSON-able description used for content-addressed keys."""
        return {
            "axes": dict(sorted(self.coords)),
            "kclass": self.kclass.to_dict(),
            "op": self.op,
        }


@dataclass(frozen=True)
class Spec:
    """One parsed spec file and the variants it enumerates, in product order."""

    path: str
    op: str
    schema_version: int
    axes: dict[str, tuple[Value, ...]]
    kclasses: dict[str, KClass]
    variants: tuple[Variant, ...]
