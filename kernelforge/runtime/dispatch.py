"""The dispatch table: (op, coordinates, K-class, device arch) -> loaded kernel (a launcher callable).

It reads one or more cache roots (layers: the user cache, then installed kernel wheels; see
`kernelforge.cache.read.layers`), each lazily per dispatch group from its dispatch views (a few KB per group, written
beside the index), or from the index itself when the views do not match it; never a directory
scan. Only entries built
from the kernel sources this package ships are eligible, so an edited kernel is never served
by a stale artifact. Resolved functions are memoized in a plain dict: after the first call of a
variant a lookup is one dict access.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..cache.read.trust import TrustedRoot
from ..cache.read.views import coords_id
from ..errors import (
    CacheError,
    KernelNotBuilt,
    UnsupportedShape,
    UntrustedCache,
)
from ..log import configure_from_env
from ..registry import find_family
from ..spec.kclass import KClass
from .arch import arch_runs_on
from .layer_reader import Candidate, LayerReader, first_class
from .tuning import STAGING_OPS, TuningTable, m_bucket

if TYPE_CHECKING:
    from ..cache.read.layers import Layer

STAGING_OP = STAGING_OPS[0]  # the op whose tables are searched for a staging rule (the columnwise op)
_log = logging.getLogger("kernelforge.runtime.dispatch")
configure_from_env()  # KERNELFORGE_LOG=info|debug; nothing at all when unset


class DispatchTable:
    """Lookup of cached kernels over the layers of `kernelforge.cache.read.layers`, in order.

    Candidates of a dispatch group are merged across layers (a key found in several layers is
    served by the earliest) and ranked as within one cache; among equally good candidates an
    earlier layer wins. So a user cache overrides a kernel wheel build for build, yet a wheel
    still serves what the user cache lacks (e.g. another arch or K-class). A refused layer
    (version mismatch) contributes nothing, is warned about once and is named in KernelNotBuilt.
    After the first call of a group its merged candidates are one dict lookup.
    """

    def __init__(self, root: Path | None = None, *, layers: Sequence[Layer] | None = None) -> None:
        if layers is None:
            if root is None:
                raise TypeError("DispatchTable needs a root or layers")
            from ..cache.read.layers import Layer

            layers = [Layer(Path(root), "--cache", str(root), True)]
        self.layers = list(layers)
        self.root = self.layers[0].root
        self.readers = [LayerReader(layer.root, layer.label, layer.writable, layer.dispatch_manifest)
                        for layer in self.layers if not layer.refused]
        self._refused = [layer for layer in self.layers if layer.refused]
        self._broken: dict[str, CacheError] = {}  # key -> why it failed to load (skipped from then on)
        self._merged: dict[str, list[Candidate]] = {}  # coords id -> candidates of every layer

    # Views over the readers (what tests and tools of one cache look at).
    @property
    def trusted(self) -> TrustedRoot:
        return self.readers[0].trusted

    @property
    def _full(self) -> bool:
        return all(r._full for r in self.readers)

    @property
    def _stale(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.readers:
            for g, n in r._stale.items():
                out[g] = out.get(g, 0) + n
        return out

    @property
    def _runtimes(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in reversed(self.readers):  # earlier layers win
            out.update(r._runtimes)
        return out

    def _group(self, group: str) -> list[Candidate]:
        cands = self._merged.get(group)
        if cands is not None:
            return cands
        if self._refused:
            from ..cache.read.layers import warn_refused

            for layer in self._refused:
                warn_refused(layer)
        seen: set[str] = set()
        merged = []
        for reader in self.readers:
            for c in reader.group(group):
                key = c.entry.get("key", "")
                if key not in seen:
                    seen.add(key)
                    merged.append(c)
        # Stable: each layer keeps its own order, and earlier layers come first among equals.
        merged.sort(key=lambda c: c.kclass.specificity, reverse=True)
        self._merged[group] = merged
        return merged

    def candidates(self, op: str, coords: dict[str, Any], capability: tuple[int, int]) -> list[Candidate]:
        """Cached kernels for op/coords (no arch, no kclass) that run on `capability`, best first."""
        cands = self._group(coords_id(op, coords))
        usable = [c for c in cands if arch_runs_on(c.arch, capability)]
        # Among equally specialized classes, code for exactly this arch before family ("f") code.
        usable.sort(key=lambda c: (c.kclass.specificity, not c.arch.endswith("f")), reverse=True)
        return usable

    def resolve(self, op: str, coords: dict[str, Any], capability: tuple[int, int],
                k: int, block: int, ptr_align: int, stride_bytes: int, m: int = 0,
                device: str = "") -> tuple[Callable, Candidate]:
        """The loaded function for this input: the most specialized cached K-class that accepts
        it, and among that class's builds the one tuned for (device, M bucket), else the heuristic."""
        cands = self.candidates(op, coords, capability)
        accepting = [c for c in cands if c.accepts(k, block, ptr_align, stride_bytes, m)]
        if accepting:
            chosen, how = self.pick_explained(op, coords, first_class(accepting), m, device)
            fn, served = self._load_first([chosen, *(c for c in accepting if c is not chosen)])
            if _log.isEnabledFor(logging.INFO):
                self._log_resolution(op, coords, capability, k, m, ptr_align, stride_bytes, cands, accepting,
                                     served, how if served is chosen else "the chosen build failed to load")
            if served.layer is not None:
                served.layer.usage.record("hit", op, served.entry.get("key", ""))
            return fn, served
        if self.readers:
            self.readers[0].usage.record("miss", op)
        if cands:
            raise UnsupportedShape(
                f"x: no cached {op} kernel accepts K = {k} (the last dimension) with a {ptr_align}-byte "
                f"aligned pointer and a row stride of {stride_bytes} bytes; cached K-classes: "
                + "; ".join(_describe(c.kclass) for c in cands))
        raise self.not_built(op, coords, capability)

    def pick(self, op: str, coords: dict[str, Any], pool: list[Candidate], m: int, device: str) -> Candidate:
        """Among builds of one K-class and arch: the newest tuning table's choice that names one
        of them (a partial `tune --only` run does not hide older tables), else the heuristic."""
        return self.pick_explained(op, coords, pool, m, device)[0]

    def pick_explained(self, op: str, coords: dict[str, Any], pool: list[Candidate], m: int,
                       device: str) -> tuple[Candidate, str]:
        """`pick`, and how it decided (the tuning table and M bucket, or the heuristic). The op's
        family is looked up once, here, for the tuning axes and the heuristic of every candidate."""
        family = find_family(op)
        axes = family.tuning_axes if family is not None else ()
        values = [{a: ((c.entry.get("variant") or {}).get("axes") or {}).get(a) for a in axes} for c in pool]
        bucket = m_bucket(m)
        unbuilt = []
        # An op without tuning axes has nothing a table could choose: no table is read for it (a
        # table that records its sources for a staging rule would cost its first call the read).
        for table in self.tuning_tables(device, pool[0].arch, op) if device and axes else ():
            want = table.choice(op, coords_id(op, coords), pool[0].kclass.name, bucket)
            for c, v in zip(pool, values):
                if want is not None and v == want:
                    return c, f"tuning table of {table.device} ({table.arch}), M bucket {bucket}: {want}"
            if want is not None:
                unbuilt.append(want)
        rank = family.rank if family is not None else (lambda max_k, v: ())
        ranked = sorted(zip(pool, values), key=lambda cv: rank(cv[0].kclass.max_k, cv[1]))
        why = ("no device name given" if not device else "the op has no tuning axes" if not axes else
               f"the tuning table's choice {unbuilt[0]} is not built" if unbuilt else
               f"no tuning table covers {device!r}, {pool[0].kclass.name}, M bucket {bucket}")
        return ranked[0][0], f"heuristic ({why}): {ranked[0][1]}"

    def _log_resolution(self, op: str, coords: dict[str, Any], capability: tuple[int, int], k: int, m: int,
                        ptr_align: int, stride_bytes: int, cands: list[Candidate], accepting: list[Candidate],
                        served: Candidate, how: str) -> None:
        desc = ",".join(f"{a}={coords[a]}" for a in sorted(coords))
        layer = served.layer.label if served.layer is not None else str(self.root)
        _log.info("%s [%s] K=%d M=%d (bucket %d) on %d.%d -> %s [%s] from layer %s; K-class %s; %s", op, desc, k, m,
                  m_bucket(m), capability[0], capability[1], served.entry.get("name"),
                  str(served.entry.get("key"))[:12], layer, served.kclass.name, how)
        if _log.isEnabledFor(logging.DEBUG):
            for c in self._group(coords_id(op, coords)):
                if c is served:
                    why = "chosen"
                elif c not in cands:
                    why = f"rejected: arch {c.arch} does not run on {capability[0]}.{capability[1]}"
                elif c not in accepting:
                    why = (f"rejected: K-class {c.kclass.name} does not accept K={k}, {ptr_align}-byte pointer, "
                           f"{stride_bytes}-byte row stride, M={m} ({_describe(c.kclass)})")
                elif c.kclass.name != served.kclass.name or c.arch != served.arch:
                    why = f"passed over: less specialized than {served.kclass.name}/{served.arch}"
                else:
                    why = "passed over: another tuning choice"
                _log.debug("  candidate %s [%s] (%s): %s", c.entry.get("name"), str(c.entry.get("key"))[:12],
                           c.layer.label if c.layer is not None else "?", why)
            stale = self._stale.get(coords_id(op, coords), 0)
            if stale:
                _log.debug("  %d more build(s) of this group come from other kernel sources (not served)", stale)

    def tuning_tables(self, device: str, arch_name: str, op: str) -> Iterator[TuningTable]:
        """Tables for (device name, arch, op's sources): each layer's newest first, earlier layers
        first; each read when the iteration reaches it (`LayerReader.tuning_tables`)."""
        for reader in self.readers:
            yield from reader.tuning_tables(device, arch_name, op)

    def staging_rule(self, device: str, arch_name: str) -> dict[str, int | None] | None:
        """The columnwise op's staged linear-scale rule of the newest tuning table of (device name,
        arch) that measured one on this package's kernel sources (`TuningTable.staging_rule`), or
        None: the shipped rule applies (`kernelforge.families.scale_layout.staging`)."""
        for table in self.tuning_tables(device, arch_name, STAGING_OP):
            rule = table.staging_rule()
            if rule is not None:
                return rule
        return None

    def load(self, cand: Candidate) -> Callable:
        """The loaded function of one candidate, through its own layer's trust checks."""
        reader = cand.layer if cand.layer is not None else self.readers[0]
        return reader.load(cand)

    def _load_first(self, order: list[Candidate]) -> tuple[Callable, Candidate]:
        """The first candidate of `order` that loads; a damaged one is skipped with one warning.

        An untrusted cache is never worked around: its error propagates."""
        first_error: CacheError | None = None
        for cand in order:
            key = cand.entry.get("key", "")
            error = self._broken.get(key)
            if error is None:
                try:
                    return self.load(cand), cand
                except UntrustedCache:
                    raise
                except CacheError as exc:
                    error = self._broken[key] = exc
                    if cand is not order[-1]:
                        warnings.warn(f"kernelforge: skipping a damaged cached build, using the next valid "
                                      f"candidate: {exc}", RuntimeWarning, stacklevel=4)
            first_error = first_error or error
        assert first_error is not None
        raise first_error

    def groups(self) -> dict[str, list[Candidate]]:
        """Every dispatch group of every layer with its servable candidates (reads the whole indexes)."""
        names: set[str] = set()
        for reader in self.readers:
            names.update(reader.groups())
        return {g: self._group(g) for g in sorted(names)}

    def not_built(self, op: str, coords: dict[str, Any], capability: tuple[int, int]) -> KernelNotBuilt:
        desc = ".".join(str(coords[k]) for k in sorted(coords))
        stale = self._stale.get(coords_id(op, coords), 0)
        why = (f" ({stale} cached build(s) of it come from other kernel sources: rebuild)" if stale else "")
        where = f"cache {self.root}"
        if len(self.layers) > 1:
            where = "layers " + ", ".join(f"{layer.label} ({layer.root})" for layer in self.layers)
        refused = "".join(f"\n  refused: {layer.label} ({layer.root}): {layer.refused}" for layer in self._refused)
        return KernelNotBuilt(
            f"no cached kernel for {op} [{desc}] on a device of capability {capability[0]}.{capability[1]} "
            f"in {where}{why}.{refused}\n{build_hint(self.root, op, coords, capability)}"
        )


def build_hint(root: Path, op: str, coords: dict[str, Any], capability: tuple[int, int]) -> str:
    """The `kernelforge build` command that produces a kernel for this call, checked against the
    default specs (it selects at least one variant), or why there is none: no spec declares an arch
    that runs on this device, or these coordinates."""
    from ..config import build_extra_install, can_build

    try:
        from ..spec import load_specs, select
        from ..spec.files import resolve_spec_paths

        variants = load_specs(resolve_spec_paths(None))
    except Exception as exc:  # no specs here (a runtime-only install may lack them): say so
        return f"No build command can be suggested: the spec files cannot be read ({exc})."
    declared = sorted({str(v.get("arch")) for v in variants})
    runs = sorted((a for a in declared if arch_runs_on(a, capability)), key=lambda a: -arch_runs_on(a, capability))
    if not runs:
        return (f"No spec declares an arch that runs on capability {capability[0]}.{capability[1]} (the specs declare "
                f"{', '.join(declared) or 'none'}): kernels for this device cannot be built from these specs.")
    for arch in runs:
        names = [v.name for v in variants if v.op == op and str(v.get("arch")) == arch
                 and all(str(v.get(a)) == str(val) for a, val in coords.items())]
        if not names:
            continue
        prefix = os.path.commonprefix(names)
        pattern = names[0] if len(names) == 1 else prefix[:prefix.rfind(".") + 1] + "*"
        if select(variants, only=[pattern], archs=[arch]):
            command = f"kernelforge build --cache {root} --arch {arch} --only '{pattern}'"
            if can_build():
                return f"Build it with:\n    {command}"
            from .. import __version__

            return (f"This environment cannot compile kernels (nvidia-cutlass-dsl is not installed): install the "
                    f"kernel wheel for {arch} built for kernelforge {__version__}, or install the build extra and "
                    f"build it:\n    {build_extra_install()}\n    {command}")
    return (f"No spec declares {op} with {', '.join(f'{a}={v}' for a, v in sorted(coords.items()))} for "
            f"{' or '.join(runs)}: add it to a spec file, then `kernelforge build`.")


def _describe(kc: KClass) -> str:
    parts = [f"K multiple of {kc.k_multiple_blocks} block(s)"]
    if kc.m_multiple:
        parts.append(f"M multiple of {kc.m_multiple}")
    if kc.max_k:
        parts.append(f"K <= {kc.max_k}")
    if kc.vector_bytes:
        parts.append(f"{kc.vector_bytes}-byte aligned")
    return f"{kc.name} ({', '.join(parts)})"
