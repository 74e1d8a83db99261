"""The dispatch table: (op, coordinates, K-class, device arch) -> loaded TVM-FFI function.

Built once per cache root from the index (one JSON read, no directory scan). Only entries built
from the kernel sources this package ships are eligible, so an edited kernel is never served
by a stale artifact. Resolved functions are memoized in a plain dict: after the first call of a
variant a lookup is one dict access.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..cache.index import load_index_for_runtime
from ..errors import KernelNotBuilt, SpecError, UnsupportedShape
from ..sources import OP_SOURCES, source_hash
from ..spec.model import KClass
from .arch import arch_runs_on
from .loader import load_function


@dataclass(frozen=True)
class Candidate:
    """One cached kernel usable for a dispatch key on some arch."""

    entry: dict[str, Any]
    arch: str
    kclass: KClass

    def accepts(self, k: int, block: int, ptr_align: int, stride_bytes: int) -> bool:
        return self.kclass.accepts(k, block, ptr_align, stride_bytes)


class DispatchTable:
    """Index-backed lookup of cached kernels for one cache root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._by_coords: dict[tuple, list[Candidate]] | None = None
        self._runtimes: dict[str, dict[str, Any]] = {}
        self._stale: dict[tuple, int] = {}

    def _load(self) -> dict[tuple, list[Candidate]]:
        if self._by_coords is not None:
            return self._by_coords
        with self._lock:
            if self._by_coords is None:
                by: dict[tuple, list[Candidate]] = {}
                for entry in load_index_for_runtime(self.root).values():
                    if entry.get("kind") == "runtime":
                        self._runtimes[entry["key"]] = entry
                        continue
                    v = entry.get("variant") or {}
                    axes, kc = v.get("axes") or {}, v.get("kclass") or {}
                    coords = _coords_key(entry.get("op", ""), (entry.get("extra") or {}).get("dispatch") or {})
                    op = entry.get("op", "")
                    if op not in OP_SOURCES or entry.get("source_hash") != source_hash(op):
                        self._stale[coords] = self._stale.get(coords, 0) + 1
                        continue
                    try:
                        kclass = KClass.from_dict(kc)
                    except SpecError:  # written by another kernelforge version: not servable
                        self._stale[coords] = self._stale.get(coords, 0) + 1
                        continue
                    by.setdefault(coords, []).append(Candidate(entry, axes.get("arch", entry.get("arch", "")), kclass))
                for cands in by.values():
                    # Most specialized K-class first; newest build first among equals.
                    cands.sort(key=lambda c: (c.kclass.specificity, c.entry.get("created", "")), reverse=True)
                self._by_coords = by
        return self._by_coords

    def candidates(self, op: str, coords: dict[str, Any], capability: tuple[int, int]) -> list[Candidate]:
        """Cached kernels for op/coords (no arch, no kclass) that run on `capability`, best first."""
        cands = self._load().get(_coords_key(op, coords), [])
        usable = [c for c in cands if arch_runs_on(c.arch, capability)]
        # Among equally specialized classes, code for exactly this arch before family ("f") code.
        usable.sort(key=lambda c: (c.kclass.specificity, not c.arch.endswith("f")), reverse=True)
        return usable

    def resolve(self, op: str, coords: dict[str, Any], capability: tuple[int, int],
                k: int, block: int, ptr_align: int, stride_bytes: int) -> tuple[Callable, Candidate]:
        """The loaded function of the most specialized cached K-class that accepts the input."""
        cands = self.candidates(op, coords, capability)
        for c in cands:
            if c.accepts(k, block, ptr_align, stride_bytes):
                runtime = self._runtimes.get(c.entry.get("extra", {}).get("runtime_key", ""))
                return load_function(c.entry, runtime), c
        if cands:
            raise UnsupportedShape(
                f"x: no cached {op} kernel accepts K = {k} (the last dimension) with a {ptr_align}-byte "
                f"aligned pointer and a row stride of {stride_bytes} bytes; cached K-classes: "
                + "; ".join(_describe(c.kclass) for c in cands))
        raise self.not_built(op, coords, capability)

    def not_built(self, op: str, coords: dict[str, Any], capability: tuple[int, int]) -> KernelNotBuilt:
        arch = f"sm_{capability[0]}{capability[1]}a"
        desc = ".".join(str(coords[k]) for k in sorted(coords))
        stale = self._stale.get(_coords_key(op, coords), 0)
        why = (f" ({stale} cached build(s) of it come from other kernel sources: rebuild)" if stale else "")
        return KernelNotBuilt(
            f"no cached kernel for {op} [{desc}] on a device of capability {capability[0]}.{capability[1]} "
            f"(arch {arch}) in cache {self.root}{why}. Build it with:\n"
            f"    kernelforge build --cache {self.root} --arch {arch} --only '{op}.*'"
        )


def _describe(kc: KClass) -> str:
    parts = [f"K multiple of {kc.k_multiple_blocks} block(s)"]
    if kc.max_k:
        parts.append(f"K <= {kc.max_k}")
    if kc.vector_bytes:
        parts.append(f"{kc.vector_bytes}-byte aligned")
    return f"{kc.name} ({', '.join(parts)})"


def _coords_key(op: str, dispatch: dict[str, Any]) -> tuple:
    # The builder records the dispatch axes other than arch and K-class (chosen here at run time).
    return (op,) + tuple(sorted(dispatch.items()))
