"""Why a call is (or is not) served by a cached build: every candidate with its verdict.

`explain_call` mirrors `DispatchTable.resolve` without loading anything: for each cached build
of the call's dispatch group, in every layer, it says why it was rejected (built from other
kernel sources, an arch that does not run on the device, a K-class that does not accept K, the
alignment, the row stride or M) or passed over (a more specialized class, another tuning
choice), and which one is chosen and by what (tuning table and M bucket, or the heuristic).
For a miss it names the nearest cached group and how its coordinates differ.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..cache.read.origin import origin_text
from ..cache.read.views import coords_id
from ..sources import OP_SOURCES, source_hash
from ..spec.kclass import KClass
from .layer_reader import first_class

_ARCH = re.compile(r"sm_(\d+)(\d)[af]?$")


def capability_of(arch: str) -> tuple[int, int]:
    """sm_90a -> (9, 0), sm_103a -> (10, 3); ValueError for anything else."""
    m = _ARCH.match(arch)
    if not m:
        raise ValueError(f"arch {arch!r}: expected sm_<major><minor>[a|f], e.g. sm_90a")
    return int(m.group(1)), int(m.group(2))


def kclass_rejection(kc: KClass, k: int, block: int, ptr_align: int, stride_bytes: int, m: int) -> str | None:
    """Why K-class `kc` does not accept this input (None: it does); the same tests as KClass.accepts."""
    if kc.k_multiple_blocks > 1 and k % (block * kc.k_multiple_blocks):
        return f"K-class {kc.name}: K = {k} is not a multiple of {kc.k_multiple_blocks} block(s) of {block}"
    if kc.max_k and k > kc.max_k:
        return f"K-class {kc.name}: K = {k} exceeds its max_k {kc.max_k}"
    if kc.m_multiple and m % kc.m_multiple:
        return f"K-class {kc.name}: M = {m} is not a multiple of {kc.m_multiple}"
    if kc.vector_bytes > 0 and ptr_align % kc.vector_bytes:
        return f"K-class {kc.name}: alignment: the pointer is {ptr_align}-byte aligned, it needs {kc.vector_bytes}"
    if kc.vector_bytes > 0 and stride_bytes % kc.vector_bytes:
        return (f"K-class {kc.name}: alignment: the row stride ({stride_bytes} bytes) is not a multiple of "
                f"{kc.vector_bytes}")
    return None


@dataclass
class Verdict:
    name: str
    key: str
    layer: str
    arch: str
    kclass: str
    status: str  # chosen | rejected | passed over
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "status": self.status.replace(" ", "_")}  # JSON: "passed_over"


@dataclass
class CallExplanation:
    op: str
    coords: dict[str, Any]
    capability: tuple[int, int]
    k: int
    m: int
    verdicts: list[Verdict] = field(default_factory=list)
    chosen: Verdict | None = None
    how: str = ""
    miss: str = ""  # why nothing serves it, with the nearest cached group and the build hint

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "coords": self.coords, "capability": list(self.capability), "k": self.k, "m": self.m,
                "chosen": self.chosen.to_dict() if self.chosen else None, "how": self.how, "miss": self.miss,
                "candidates": [v.to_dict() for v in self.verdicts]}


def explain_call(table: Any, op: str, coords: dict[str, Any], capability: tuple[int, int], k: int, block: int,
                 ptr_align: int, stride_bytes: int, m: int, device: str = "") -> CallExplanation:
    """Every cached build of (op, coords) in the table's layers, with its verdict (see the module docstring)."""
    from .dispatch import build_hint

    out = CallExplanation(op, dict(coords), capability, k, m)
    group = coords_id(op, coords)
    current = source_hash(op) if op in OP_SOURCES else None
    # Builds from other sources never become candidates: list them from the layers' indexes.
    for reader in table.readers:
        reader.load_index_once()
    cands = table.candidates(op, coords, capability)
    accepting = [c for c in cands if c.accepts(k, block, ptr_align, stride_bytes, m)]
    chosen = None
    pool: list[Any] = []
    if accepting:
        pool = first_class(accepting)
        chosen, out.how = table.pick_explained(op, coords, pool, m, device)
    for c in table._group(group):
        e = c.entry
        where = (c.layer.label if c.layer else "") + f", {origin_text(e.get('extra'), short=True)}"
        v = Verdict(e.get("name", "?"), e.get("key", ""), where, c.arch, c.kclass.name, "rejected", "")
        if c not in cands:
            v.why = f"arch: {c.arch} does not run on capability {capability[0]}.{capability[1]}"
        elif c not in accepting:
            v.why = kclass_rejection(c.kclass, k, block, ptr_align, stride_bytes, m) or "K-class does not accept"
        elif c is chosen:
            v.status, v.why = "chosen", out.how
            out.chosen = v
        elif c not in pool:
            v.status, v.why = "passed over", (f"K-class {c.kclass.name} ({c.arch}) is less specialized than "
                                              f"{chosen.kclass.name} ({chosen.arch})")
        else:
            v.status, v.why = "passed over", f"tuning: {out.how.split(':')[0]} chose {chosen.entry.get('name')}"
        out.verdicts.append(v)
    for reader in table.readers:
        for e in _group_entries(reader, group):
            if current is None or e.get("source_hash") != current:
                out.verdicts.append(Verdict(e.get("name", "?"), e.get("key", ""), reader.label, e.get("arch", ""),
                                            ((e.get("variant") or {}).get("kclass") or {}).get("name", "?"),
                                            "rejected", f"sources: built from other kernel sources of {op} "
                                            f"({str(e.get('source_hash'))[:12]}, this kernelforge has "
                                            f"{str(current)[:12]}): stale, never served"))
    if chosen is None:
        near = _nearest_group(table, op, coords)
        near_text = ""
        if near is not None:
            diff = [f"{a}: {near[1].get(a)} (cached) vs {coords.get(a)}" for a in sorted(set(near[1]) | set(coords))
                    if str(near[1].get(a)) != str(coords.get(a))]
            near_text = f" The nearest cached group is {op} [{near[0]}]: " + "; ".join(diff) + "."
        if not out.verdicts:
            out.miss = f"no cached build of {op} with these coordinates in any layer.{near_text}"
        elif cands:
            out.miss = "no cached K-class accepts this input (UnsupportedShape)."
        else:
            out.miss = f"no cached build runs on capability {capability[0]}.{capability[1]}.{near_text}"
        out.miss += "\n" + build_hint(table.root, op, coords, capability)
    return out


def _group_entries(reader: Any, group: str) -> list[dict[str, Any]]:
    """The layer's builds of `group`, stale ones included (`LayerReader.group_entries`); none if
    the layer cannot be read (its problem is reported by `cache verify`)."""
    try:
        return reader.group_entries(group)
    except Exception:  # noqa: BLE001 - a report lists what it can read
        return []


def _nearest_group(table: Any, op: str, coords: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    best = None
    for reader in table.readers:
        for cands in reader.groups().values():
            if not cands or cands[0].entry.get("op") != op:
                continue
            d = (cands[0].entry.get("extra") or {}).get("dispatch") or {}
            score = sum(str(d.get(a)) == str(v) for a, v in coords.items())
            if best is None or score > best[0]:
                best = (score, ",".join(f"{a}={d[a]}" for a in sorted(d)), d)
    return (best[1], best[2]) if best else None


def dispatch_axes(table: Any, op: str) -> dict[str, set[str]]:
    """The dispatch axes of `op` in the table's layers, with the values cached for each."""
    out: dict[str, set[str]] = {}
    for reader in table.readers:
        for cands in reader.groups().values():
            for c in cands:
                if c.entry.get("op") == op:
                    for a, v in ((c.entry.get("extra") or {}).get("dispatch") or {}).items():
                        out.setdefault(a, set()).add(str(v))
    return out


def parse_shape(text: str) -> tuple[int, int]:
    """'4096x7168' or '8,512,7168' -> (M, K): M the product of the leading dimensions."""
    dims = [int(d) for d in re.split(r"[x,*]", text.strip()) if d]
    if not dims or any(d < 0 for d in dims):
        raise ValueError(f"shape {text!r}: expected dimensions like 4096x7168")
    m = 1
    for d in dims[:-1]:
        m *= d
    return m, dims[-1]


def nearest_names(name: str, names: Sequence[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, list(names), n=3, cutoff=0.5)
