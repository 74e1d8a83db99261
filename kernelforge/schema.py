"""Op schemas: which axes an op has, each axis's domain, and cross-axis rules (public).

A leaf: it imports only the format table. Each op family states its own schema
(`kernelforge.registry.OpFamily.schema`) with `op_schema`, from its own axes and the standard
ones below (the platform's `kclass` and `arch`, and the block-scaled quantization axes every
quantizing family shares); nothing here grows with the families. Imports neither torch nor
cutlass.

The schema types are NamedTuples, not frozen dataclasses: they are created at every
`import kernelforge`, where a NamedTuple is several times cheaper to create.
"""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

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


# The standard axes: the runtime chooses `kclass` and `arch`; the quantization axes are those
# of the format table. A family uses them by name or passes its own Axis of the same name to
# narrow a domain (e.g. HALF_DTYPE).
FORMAT = Axis("format", str, choices=tuple(FORMATS))
SCALE_MODE = Axis("scale_mode", str, choices=SCALE_MODES)
LAYOUT = Axis("layout", str, choices=LAYOUTS)
DTYPE = Axis("dtype", str, choices=INPUT_DTYPES)
HALF_DTYPE = Axis("dtype", str, choices=("bfloat16", "float16"))  # 16-bit inputs only
KCLASS = Axis("kclass", str, kclass=True)
ARCH = Axis("arch", str, choices=ARCHES)
STANDARD_AXES: Mapping[str, Axis] = MappingProxyType({a.name: a for a in (FORMAT, SCALE_MODE, LAYOUT, DTYPE, KCLASS,
                                                                          ARCH)})


def _scale_mode_fits_format(c: Mapping[str, Value]) -> str | None:
    allowed = FORMATS[c["format"]].scale_modes
    if c["scale_mode"] in allowed:
        return None
    return (f"scale_mode {c['scale_mode']!r} is not valid for format {c['format']!r} "
            f"(allowed: {list(allowed)})")


SCALE_MODE_FITS_FORMAT = Constraint(("format", "scale_mode"), _scale_mode_fits_format)


def op_schema(name: str, dispatch: tuple[Axis | str, ...], tuning: tuple[Axis | str, ...] = (),
              constraints: tuple[Constraint, ...] = (), kclass_required: tuple[str, ...] = ()) -> OpSchema:
    """The schema of op `name`: its dispatch axes, then its tuning axes, each an `Axis` or the
    name of a standard axis (`STANDARD_AXES`). ValueError for an unknown name or an axis listed twice."""
    axes: list[Axis] = []
    for a in (*dispatch, *tuning):
        if isinstance(a, str):
            if a not in STANDARD_AXES:
                raise ValueError(f"op {name!r}: {a!r} is not a standard axis ({sorted(STANDARD_AXES)}); "
                                 "pass an Axis for an axis of the op's own")
            a = STANDARD_AXES[a]
        axes.append(a)
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"op {name!r}: an axis is listed twice in {names}")
    return OpSchema(name, tuple(names[:len(dispatch)]), tuple(names[len(dispatch):]),
                    MappingProxyType({a.name: a for a in axes}), tuple(constraints), kclass_required=kclass_required)
