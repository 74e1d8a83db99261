"""The op-family registry: every kernel family, built in or from an installed package (public).

An `OpFamily` says everything the build, the runtime and the tuner need to know about one
kind of kernel: its spec schema (axes, domains, tuning axes, K-class rules), the files its
kernel is built from (hashed into every cache key), where its CuTe-DSL argument builder lives
(imported at build time only), the ordered arguments of the exported function, the tuning
heuristic and the timing calls of `kernelforge tune`, and its default spec files.

Every family is declared under the entry-point group `kernelforge.ops`: kernelforge's own
(`kernelforge/families/<name>/family.py`) by kernelforge's pyproject, a plugin's by its
package (README, "Writing a kernel family"). A built-in op is looked up in kernelforge's own
declaration only (one metadata file), so its first call never scans every installed
distribution; other names scan the group once. Importing this module imports neither torch
nor cutlass. The registry owns its caches (`reload_plugins` clears them) and the read-only
views over it (`OP_SCHEMAS`, `OP_SOURCES` of `kernelforge.sources`).
"""

import functools
import importlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from kernelforge.config import checkout_root, entry_points, read_toml
from kernelforge.schema import OpSchema

ENTRY_POINT_GROUP = "kernelforge.ops"
PACKAGE_DIR = Path(__file__).resolve().parent  # kernelforge/
BUILTIN_MODULES = "kernelforge.families."  # where kernelforge's own families are defined

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
    frozen dataclass because every `import kernelforge` creates it (a NamedTuple class is
    several times cheaper to create).
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


def module_sources(*modules: str) -> tuple[Path, ...]:
    """The source files of installed Python modules (dotted names), for `OpFamily.sources` of a
    family whose kernel is another package's code: their bytes then count in its cache keys.

    Found without importing them or their packages (only the top-level name is looked up), so
    a family module that calls this at import stays free of that package's imports. A package
    stands for its `__init__.py`. ModuleNotFoundError names a module that is not installed or
    has no Python source file.
    """
    import importlib.util

    out = []
    specs: dict[str, Any] = {}
    for name in modules:
        top, *rest = name.split(".")
        if top not in specs:
            specs[top] = importlib.util.find_spec(top) if top else None
        spec = specs[top]
        if spec is None:
            raise ModuleNotFoundError(f"{name}: no installed module {top!r}", name=name)
        if not rest:
            path = Path(spec.origin) if spec.origin else None
        else:
            dirs = [Path(d).joinpath(*rest[:-1]) for d in spec.submodule_search_locations or ()]
            found = [f for d in dirs for f in (d / f"{rest[-1]}.py", d / rest[-1] / "__init__.py") if f.is_file()]
            path = found[0] if found else None
        if path is None or path.suffix != ".py" or not path.is_file():
            raise ModuleNotFoundError(f"{name}: no Python source file found for it in {top!r}", name=name)
        out.append(path.resolve())
    return tuple(out)


def _problem(fam: object) -> str | None:
    if not isinstance(fam, OpFamily):
        return f"expected an OpFamily, got {type(fam).__name__}"
    if not fam.builder or ":" not in fam.builder:
        return f"builder {fam.builder!r} is not 'module:function'"
    missing = [str(p) for p in fam.source_paths() if not p.is_file()]
    if missing:
        return f"source file(s) not found: {missing}"
    return None


def own_distribution(package_dir: Path) -> Any:
    """The `importlib.metadata` distribution installed with the kernelforge package at
    `package_dir`: the `kernelforge-<version>.dist-info` beside it, as an installed wheel lays
    them out (https://packaging.python.org/en/latest/specifications/recording-installed-packages/);
    None where there is none (an editable install, a checkout). Read in place, not found by
    `importlib.metadata.distribution`, which lists sys.path up to it, the working directory first
    (a cost of every process's first call that grows with that directory)."""
    import importlib.metadata as md

    from kernelforge import __version__

    dist_info = package_dir.parent / f"kernelforge-{__version__}.dist-info"
    return md.PathDistribution(dist_info) if (dist_info / "entry_points.txt").is_file() else None


def _builtin_declarations() -> list[tuple[str, str]]:
    """(name, "module:attr") of kernelforge's own families: its installed metadata's entry points
    in the group, else (a source checkout that is not installed) its pyproject's table."""
    import importlib.metadata as md

    own = own_distribution(Path(__file__).parent)
    try:
        eps = (own if own is not None else md.distribution("kernelforge")).entry_points
    except md.PackageNotFoundError:
        eps = ()
    found = [(ep.name, ep.value) for ep in eps
             if ep.group == ENTRY_POINT_GROUP and ep.value.startswith(BUILTIN_MODULES)]
    if found:
        return found
    root = checkout_root()
    if root is None:
        return []
    table = read_toml(root / "pyproject.toml").get("project", {}).get("entry-points", {})
    return [(k, v) for k, v in table.get(ENTRY_POINT_GROUP, {}).items() if v.startswith(BUILTIN_MODULES)]


def _load_declared(value: str) -> OpFamily:
    module, _, attr = value.partition(":")
    fam = getattr(importlib.import_module(module), attr)
    problem = _problem(fam)
    if problem:
        raise ValueError(f"{value}: {problem}")
    return fam


@functools.lru_cache(maxsize=1)
def builtin_families() -> dict[str, OpFamily]:
    """The families that ship with kernelforge, by name (no scan of other distributions)."""
    out = {}
    for name, value in sorted(_builtin_declarations()):
        fam = _load_declared(value)
        if fam.name != name:
            raise ValueError(f"entry point {name!r} ({value}) defines op family {fam.name!r}")
        out[name] = fam
    return out


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
    builtin = builtin_families()
    out: dict[str, OpFamily] = {}
    for ep in sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: (e.value, e.name)):
        if ep.value.startswith(BUILTIN_MODULES):
            continue  # kernelforge's own, already in `builtin`
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
    _changed()
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
    _changed()


def plugin_spec_files() -> list[Path]:
    """The spec files the installed plugins' (and the code-registered) families ship."""
    return [Path(p) for fam in {**plugin_families(), **_registered}.values() for p in fam.spec_files]


def spec_files() -> list[Path]:
    """Every family's default spec files: the built-ins', then the plugins' (what `kernelforge
    build` and `specs show` read without --spec)."""
    return [Path(p) for fam in builtin_families().values() for p in fam.spec_files] + plugin_spec_files()


# Called after the set of families changes: caches derived from it (source hashes) register here.
_on_change: list[Callable[[], None]] = []


def on_change(callback: Callable[[], None]) -> Callable[[], None]:
    """Register `callback` to run whenever a family is registered or the plugins are reloaded."""
    _on_change.append(callback)
    return callback


def _changed() -> None:
    for callback in _on_change:
        callback()


class FamilyView(Mapping[str, Any]):
    """A read-only mapping op -> `project(family)` over every registered family, evaluated on lookup."""

    def __init__(self, project: Callable[[OpFamily], Any]) -> None:
        self._project = project

    def __getitem__(self, op: str) -> Any:
        if not isinstance(op, str):
            raise KeyError(op)
        return self._project(get_family(op))

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and find_family(op) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(families())

    def __len__(self) -> int:
        return len(families())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"


OP_SCHEMAS: Mapping[str, OpSchema] = FamilyView(lambda family: family.schema)


__all__ = ["ENTRY_POINT_GROUP", "OP_SCHEMAS", "FamilyView", "OpFamily", "builtin_api", "builtin_families", "families",
           "find_family", "get_family", "module_sources", "on_change", "plugin_families", "plugin_spec_files",
           "register", "reload_plugins", "spec_files"]
