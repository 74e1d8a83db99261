"""Op families: one definition per kernel family, and the registry every table derives from.

An `OpFamily` says everything the build, the runtime and the tuner need to know about one
kind of kernel: its spec schema (axes, domains, tuning axes, K-class rules), the files its
kernel is built from (hashed into every cache key), where its CuTe-DSL argument builder lives
(imported at build time only), the ordered arguments of the exported function, the tuning
heuristic and the timing calls of `kernelforge tune`, and its default spec files.

The registry holds the built-in families (`kernelforge.families.builtin`) and those that
installed packages declare under the entry-point group `kernelforge.ops` (see README,
"Writing a kernel family"). Importing this module imports neither torch nor cutlass; plugins
are looked up only when an op that is not built in is asked for (or every family is listed),
so the built-in ops' first call never scans entry points.
"""

import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from kernelforge.family_view import FamilyView  # noqa: F401  (re-exported)
from kernelforge.spec.schema import OpSchema

ENTRY_POINT_GROUP = "kernelforge.ops"
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # kernelforge/

# (max_k of the candidate's K-class, its tuning values) -> sort key; the smallest wins.
Heuristic = Callable[[int, Mapping[str, Any]], tuple]
# (dispatch coordinates, loaded function, M, K, L2 bytes) -> zero-argument calls to time.
TimingCalls = Callable[[dict[str, Any], Callable, int, int, int], list[Callable[[], Any]]]


class OpFamily(NamedTuple):
    """One kernel family: what every layer of kernelforge reads about an op.

    * `schema`: the op's axes (`OpSchema`; its name is the family's name). Dispatch axes select
      a kernel at run time, tuning axes are build candidates timed by `kernelforge tune`.
    * `sources`: the files the kernel is built from, relative to `source_root` (or absolute).
      Their bytes, with kernelforge's shared kernel helpers, form the op's source hash, which is
      part of every cache key: editing one rebuilds the op's variants and stops the runtime from
      serving older builds. A plugin's distribution name and version are hashed in as well.
    * `builder`: "module:function" of the CuTe-DSL argument builder, imported only when a
      variant is compiled. `function(variant)` returns `(kernel, fake_args)`: the kernel object
      and fake arguments in the exact order of the exported function's signature.
    * `args`: the names of the exported function's arguments in call order (the trailing CUDA
      stream, taken from the TVM-FFI environment, is not one of them). The build checks that the
      builder's fake arguments match them, so a mismatch fails the build, not the first call.
    * `heuristic(max_k, tuning_values)`: the sort key ranking a K-class's candidates when no
      tuning table applies (smallest first); None: the first candidate found.
    * `timing_calls(coords, fn, m, k, l2_bytes)`: the calls `kernelforge tune` times (may import
      torch); None: the family is not tuned.
    * `spec_files`: spec files that `kernelforge build` and `specs show` read by default.
    * `api`: "module:name" of the family's public torch-facing functions (each an eager function
      with its `torch.library` custom op, see `kernelforge.ops.torch_op`), imported on first use;
      the built-ins' are the names `kernelforge` exports.
    * `distribution`, `version`: the installed package that defines the family ("" for the
      built-ins; filled from the entry point's distribution for plugins).

    Immutable; `family._replace(field=value)` derives a changed copy. A NamedTuple rather than a
    frozen dataclass because every `import kernelforge` creates it (1.2 -> 0.2 ms, build host).
    """

    schema: OpSchema
    sources: tuple[str | Path, ...]
    builder: str
    args: tuple[str, ...]
    heuristic: Heuristic | None = None
    timing_calls: TimingCalls | None = None
    spec_files: tuple[Path, ...] = ()
    api: tuple[str, ...] = ()
    source_root: Path = PACKAGE_DIR
    distribution: str = ""
    version: str = ""
    stream_arg: bool = True  # the builder appends a fake environment stream

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def tuning_axes(self) -> tuple[str, ...]:
        return self.schema.tuning_axes

    def source_paths(self) -> list[Path]:
        """The family's own kernel source files (absolute)."""
        return [self.source_root / s for s in self.sources]

    def load_builder(self) -> Callable[[Any], tuple[object, list[object]]]:
        """Import the CuTe-DSL argument builder (build time only: it imports cutlass)."""
        module, _, attr = self.builder.partition(":")
        if not module or not attr:
            raise ValueError(f"op family {self.name!r}: builder {self.builder!r} is not 'module:function'")
        return getattr(importlib.import_module(module), attr)

    def check_fake_args(self, fake_args: list[object]) -> None:
        """Raise ValueError when the builder's fake arguments do not match `args` (+ the stream)."""
        want = len(self.args) + (1 if self.stream_arg else 0)
        if len(fake_args) != want:
            raise ValueError(
                f"op family {self.name!r}: builder {self.builder} returned {len(fake_args)} fake arguments, "
                f"but the family declares {want} ({', '.join(self.args)}{', stream' if self.stream_arg else ''})")

    def public_names(self) -> dict[str, str]:
        """The family's public functions: name -> defining module (from `api`)."""
        out = {}
        for ref in self.api:
            module, _, attr = ref.partition(":")
            out[attr] = module
        return out

    def rank(self, max_k: int, values: Mapping[str, Any]) -> tuple:
        """The heuristic's sort key of one candidate (() without a heuristic)."""
        return self.heuristic(max_k, values) if self.heuristic is not None else ()


def _problem(fam: object) -> str | None:
    if not isinstance(fam, OpFamily):
        return f"expected an OpFamily, got {type(fam).__name__}"
    if not fam.builder or ":" not in fam.builder:
        return f"builder {fam.builder!r} is not 'module:function'"
    missing = [str(p) for p in fam.source_paths() if not p.is_file()]
    if missing:
        return f"source file(s) not found: {missing}"
    return None


@functools.lru_cache(maxsize=1)
def builtin_families() -> dict[str, OpFamily]:
    """The families that ship with kernelforge, by name (no entry-point scan)."""
    from kernelforge.families.builtin import BUILTIN

    return {f.name: f for f in BUILTIN}


@functools.lru_cache(maxsize=1)
def builtin_api() -> dict[str, str]:
    """The public functions of the built-in families (what `kernelforge` exports): name -> module."""
    names: dict[str, str] = {}
    for fam in builtin_families().values():
        names.update(fam.public_names())
    return names


def _entry_point_families(ep: Any) -> list[OpFamily]:
    obj = ep.load()
    if callable(obj) and not isinstance(obj, OpFamily):
        obj = obj()
    found = [obj] if isinstance(obj, OpFamily) else list(obj)
    dist = getattr(ep, "dist", None)
    name, version = (dist.metadata["Name"] or "", dist.version or "") if dist is not None else ("", "")
    out = []
    for fam in found:
        problem = _problem(fam)
        if problem:
            raise ValueError(problem)
        if not fam.distribution:  # the key must change with the package that defines it
            fam = fam._replace(distribution=name or ep.value.split(":", 1)[0], version=fam.version or version)
        out.append(fam)
    return out


@functools.lru_cache(maxsize=1)
def plugin_families() -> dict[str, OpFamily]:
    """Families declared by installed packages under the `kernelforge.ops` entry-point group.

    A plugin that fails to load, or that names a family already defined, is skipped with one
    RuntimeWarning naming it; the built-in families and the other plugins still work."""
    from kernelforge.config import entry_points

    builtin = builtin_families()
    out: dict[str, OpFamily] = {}
    for ep in sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: (e.value, e.name)):
        try:
            fams = _entry_point_families(ep)
        except Exception as exc:  # noqa: BLE001 - any plugin error: warn, never break the built-ins
            warnings.warn(f"kernelforge: ignoring op plugin {ep.name!r} ({ep.value}): "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        for fam in fams:
            if fam.name in builtin or fam.name in out:
                warnings.warn(f"kernelforge: ignoring op family {fam.name!r} of plugin {ep.name!r} ({ep.value}): "
                              "an op of that name is already defined", RuntimeWarning, stacklevel=2)
                continue
            out[fam.name] = fam
    return out


# Families registered from code (`register`), by name: for packages used without being installed.
_registered: dict[str, OpFamily] = {}


def register(family: OpFamily, *, distribution: str = "", version: str = "") -> OpFamily:
    """Declare an op family from code, for a package that is importable but not installed (so
    it has no entry point), e.g. on PYTHONPATH on a GPU node; returns the family as registered.

    `distribution` and `version` (default: the family's own) are hashed into its cache keys as
    for an entry point, so a cache built from the installed package is served when the same
    name and version are given. Registering the same family again is a no-op; a different
    family under a name already defined raises ValueError.
    """
    problem = _problem(family)
    if problem:
        raise ValueError(f"family: {problem}")
    dist = distribution or family.distribution
    if not dist:
        raise ValueError(f"distribution: op family {family.name!r} needs the name of the package defining it "
                         "(it is part of every cache key)")
    fam = family._replace(distribution=dist, version=version or family.version)
    known = find_family(fam.name)
    if known is not None:
        if known == fam:
            return known
        raise ValueError(f"family: an op named {fam.name!r} is already defined "
                         f"({known.distribution or 'kernelforge'} {known.version})")
    _registered[fam.name] = fam
    from kernelforge import sources

    sources.source_hash.cache_clear()
    return fam


def families() -> dict[str, OpFamily]:
    """Every op family: the built-ins, then the installed plugins', then those registered from code."""
    return {**builtin_families(), **plugin_families(), **_registered}


def get_family(op: str) -> OpFamily:
    """The family of `op` (built-ins first, so a built-in op never scans entry points); KeyError if unknown."""
    fam = builtin_families().get(op)
    if fam is None:
        fam = _registered.get(op) or plugin_families().get(op)
        if fam is None:
            raise KeyError(op)
    return fam


def find_family(op: str) -> OpFamily | None:
    """The family of `op`, or None."""
    try:
        return get_family(op)
    except KeyError:
        return None


def reload_plugins() -> None:
    """Forget the plugins found so far (the next lookup scans the entry points again)."""
    plugin_families.cache_clear()
    from kernelforge import sources

    sources.source_hash.cache_clear()


def plugin_spec_files() -> list[Path]:
    """The spec files the installed plugins' (and the code-registered) families ship (read by default
    after the package's own)."""
    return [Path(p) for fam in {**plugin_families(), **_registered}.values() for p in fam.spec_files]


__all__ = ["ENTRY_POINT_GROUP", "FamilyView", "OpFamily", "builtin_api", "builtin_families", "families", "find_family",
           "get_family", "plugin_families", "plugin_spec_files", "register", "reload_plugins"]
