"""Op schemas: which axes each op has, each axis's domain, and cross-axis rules.

Each op's `OpSchema` is part of its op family (`kernelforge.families`); `OP_SCHEMAS` is a
read-only view over the family registry (built-in and plugin families). This module holds the
schema types and the axes ops share. Imports neither torch nor cutlass.

The schema types are NamedTuples, not frozen dataclasses: they are created at every
`import kernelforge`, where a frozen dataclass costs 0.6-0.8 ms and a NamedTuple ~0.1-0.2 ms
(build host).
"""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from kernelforge.family_view import FamilyView
from kernelforge.formats import FORMATS, INPUT_DTYPES, LAYOUTS, SCALE_MODES

SCHEMA_VERSIONS: tuple[int, ...] = (1,)

ARCHES: tuple[str, ...] = ("sm_90a", "sm_100a", "sm_100f", "sm_103a", "sm_120a")

# Compute capability each target is compiled for; the runtime matches it against the device.
ARCH_CAPABILITY: dict[str, tuple[int, int]] = {
    "sm_90a": (9, 0),
    "sm_100a": (10, 0),
    "sm_100f": (10, 0),
    "sm_103a": (10, 3),
    "sm_120a": (12, 0),
}


def arch_runs_on(arch: str, capability: tuple[int, int]) -> bool:
    """Whether code compiled for `arch` runs on a device of `capability`.

    `a` targets (arch-specific) run only on exactly their capability; `f` targets
    (family-specific) run on the same major version with an equal or higher minor.
    """
    major, minor = ARCH_CAPABILITY[arch]
    if arch.endswith("f"):
        return capability[0] == major and capability[1] >= minor
    return tuple(capability) == (major, minor)


Value = str | int


class Axis(NamedTuple):
    """One axis of an op: its value type and domain.

    `choices` lists the allowed values, or `check` decides (then `expected` describes the
    domain in error messages). A `kclass` axis takes its values from `[<axis>.<name>]`
    tables of the spec file instead. `abbrev` is the prefix of a tuning axis in variant names.
    """

    name: str
    type: type
    choices: tuple[Value, ...] | None = None
    check: Callable[[Value], bool] | None = None
    expected: str = ""
    abbrev: str = ""
    kclass: bool = False

    def problem(self, value: object) -> str | None:
        """Why `value` is not in this axis's domain, or None when it is."""
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return f"expected an integer, got {value!r}"
        elif not isinstance(value, self.type):
            return f"expected a {self.type.__name__}, got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"unknown value {value!r}; expected one of {list(self.choices)}"
        if self.check is not None and not self.check(value):
            return f"invalid value {value!r}; expected {self.expected}"
        return None


class Constraint(NamedTuple):
    """A rule over several axes that the product must satisfy after exclusions.

    `problem(coords)` returns why a combination is invalid, or None.
    """

    axes: tuple[str, ...]
    problem: Callable[[Mapping[str, Value]], str | None]


class OpSchema(NamedTuple):
    """The axes of one op: dispatch axes select a kernel at run time, tuning axes do not."""

    name: str
    dispatch_axes: tuple[str, ...]
    tuning_axes: tuple[str, ...]
    domains: Mapping[str, Axis] = MappingProxyType({})
    constraints: tuple[Constraint, ...] = ()
    kclass_axis: str = "kclass"
    kclass_required: tuple[str, ...] = ()  # optional K-class fields this op's kernel needs

    @property
    def axes(self) -> tuple[str, ...]:
        """All axes in canonical order: dispatch axes, then tuning axes."""
        return self.dispatch_axes + self.tuning_axes

    def dispatch_key(self, values: Mapping[str, Value]) -> tuple[Value, ...]:
        """The runtime lookup key: op name, then the dispatch values in schema order."""
        return (self.name, *(values[a] for a in self.dispatch_axes))


# Axes shared by ops; an op picks the ones it has by name.
AXES: dict[str, Axis] = {
    a.name: a
    for a in (
        Axis("format", str, choices=tuple(FORMATS)),
        Axis("scale_mode", str, choices=SCALE_MODES),
        Axis("layout", str, choices=LAYOUTS),
        Axis("dtype", str, choices=INPUT_DTYPES),
        Axis("kclass", str, kclass=True),
        Axis("arch", str, choices=ARCHES),
        Axis("threads", int, check=lambda v: 32 <= v <= 1024 and v % 32 == 0,
             expected="a multiple of 32 in 32..1024", abbrev="t"),
        Axis("units_per_thread", int, check=lambda v: 1 <= v <= 16,
             expected="an integer in 1..16", abbrev="u"),
        # Fused RMSNorm ops: "none" = rmsnorm(x), "add" = rmsnorm(x + residual), residual updated.
        Axis("residual", str, choices=("none", "add")),
        # Columnwise quantization: "columnwise" writes x.T's quantization only, "dual" both sides.
        Axis("outputs", str, choices=("columnwise", "dual")),
        # Columnwise transform: "rht" = random Hadamard transform of 16-row groups (NVFP4, bf16).
        Axis("transform", str, choices=("none", "rht")),
        # Elements of a row each thread keeps in registers (whole scale blocks of every format).
        Axis("elements", int, check=lambda v: 32 <= v <= 256 and v % 32 == 0,
             expected="a multiple of 32 in 32..256", abbrev="e"),
        # Grouped quantization: "experts" = a stacked [E, N, K] input with per-expert scale
        # slabs; "offsets" = a [T, K] input split into row groups by cumulative group ends.
        Axis("grouping", str, choices=("experts", "offsets")),
    )
}


OP_SCHEMAS: Mapping[str, OpSchema] = FamilyView(lambda family: family.schema)
