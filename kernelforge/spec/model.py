"""Frozen records a spec enumerates: K-classes, variants, and the parsed spec file."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelforge.errors import SpecError
from kernelforge.spec.schema import OP_SCHEMAS, OpSchema, Value

KCLASS_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
KCLASS_FIELDS = ("k_multiple_blocks", "vector_bytes")
VECTOR_BYTES = (0, 1, 2, 4, 8, 16)


def kclass_problem(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (key, reason) of the first invalid K-class field, or None when all are valid."""
    for key in fields:
        if key not in KCLASS_FIELDS:
            return key, f"unknown key; expected {list(KCLASS_FIELDS)}"
    for key in KCLASS_FIELDS:
        if key not in fields:
            return key, "missing"
    k, vb = fields["k_multiple_blocks"], fields["vector_bytes"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return "k_multiple_blocks", f"expected an integer >= 1, got {k!r}"
    if isinstance(vb, bool) or not isinstance(vb, int) or vb not in VECTOR_BYTES:
        return "vector_bytes", f"expected one of {list(VECTOR_BYTES)}, got {vb!r}"
    return None


@dataclass(frozen=True)
class KClass:
    """A compile-time specialization on K (measured in scale blocks) and on alignment.

    `vector_bytes` = 0 means element-size accesses with no alignment requirement.
    """

    name: str
    k_multiple_blocks: int
    vector_bytes: int

    @property
    def specificity(self) -> tuple[int, int]:
        """Sort key: a more specialized class sorts higher."""
        return (self.vector_bytes, self.k_multiple_blocks)

    def accepts(self, k_blocks: int, ptr_align_bytes: int, row_stride_bytes: int) -> bool:
        """Whether a problem with these K blocks and alignments may use this class."""
        if k_blocks % self.k_multiple_blocks:
            return False
        if self.vector_bytes > 0:
            return (ptr_align_bytes % self.vector_bytes == 0
                    and row_stride_bytes % self.vector_bytes == 0)
        return True

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, keys sorted."""
        return {"k_multiple_blocks": self.k_multiple_blocks, "name": self.name,
                "vector_bytes": self.vector_bytes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KClass:
        """Inverse of `to_dict`; raise SpecError on a missing or invalid field."""
        name = d.get("name")
        if not isinstance(name, str) or not KCLASS_NAME.fullmatch(name):
            raise SpecError(f"kclass name: expected an identifier, got {name!r}")
        bad = kclass_problem({k: v for k, v in d.items() if k != "name"})
        if bad:
            raise SpecError(f"kclass {name!r} {bad[0]}: {bad[1]}")
        return cls(name, d["k_multiple_blocks"], d["vector_bytes"])


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
