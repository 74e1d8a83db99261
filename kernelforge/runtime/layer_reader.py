"""One cache root as the runtime reads it (a layer): its dispatch groups, runtime libraries and
tuning tables, read lazily per group from the dispatch views (or from the index when the views
do not match it), every file opened through the root's trust policy. Only entries built from
the kernel sources this package ships become candidates."""
from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from ..cache.read.index import load_index_for_runtime
from ..cache.read.layout import Layout
from ..cache.read.origin import origin_rank
from ..cache.read.trust import TrustedRoot
from ..cache.read.usage import usage_log
from ..cache.read.views import DispatchViews, entry_group, with_main_path
from ..errors import (
    CacheError,
    SpecError,
    UntrustedCache,
)
from ..sources import OP_SOURCES, source_hash
from ..spec.kclass import KClass
from .loader import load_function, read_verified_json
from .tuning import TuningTable, table_entries_for

if TYPE_CHECKING:
    pass


class Candidate(NamedTuple):
    """One cached kernel usable for a dispatch key on some arch, and the layer that holds it
    (a NamedTuple: cheaper to create at import than a frozen dataclass, see `cache.read.layout.Layout`)."""

    entry: dict[str, Any]
    arch: str
    kclass: KClass
    layer: LayerReader | None = None

    def accepts(self, k: int, block: int, ptr_align: int, stride_bytes: int, m: int = 0) -> bool:
        return self.kclass.accepts(k, block, ptr_align, stride_bytes, m)


def first_class(accepting: list[Candidate]) -> list[Candidate]:
    """The builds of the best accepting candidate's K-class and arch: the tuning candidates one
    call chooses among (`DispatchTable.pick`)."""
    first = accepting[0]
    return [c for c in accepting if c.kclass.name == first.kclass.name and c.arch == first.arch]


class LayerReader:
    """The runtime's view of one cache root (one layer): its dispatch groups, runtime libraries
    and tuning tables, read lazily from the dispatch views, or from the index when they do not
    match it (never for a signed kernel wheel: `signed_manifest`). Every file is opened through
    the trust policy of this root."""

    def __init__(self, root: Path, label: str = "", writable: bool = False,
                 signed_manifest: bytes | None = None) -> None:
        self.root = Path(root)
        self.label = label or str(self.root)
        # A signed kernel wheel's checked dispatch manifest: every group is read through it, never
        # from the index (cache/read/wheel_signature.py).
        self._signed_manifest = signed_manifest
        # Advisory last-use/hit/miss records (cache/read/usage.py); never on a read-only layer.
        self.usage = usage_log(self.root, writable)
        self.trusted = TrustedRoot(self.root)
        self._lock = threading.Lock()
        self._groups: dict[str, list[Candidate]] = {}  # coords id -> candidates, best first
        self._views: DispatchViews | None = None  # read on first use
        self._full = False  # every group built from the index itself
        self._runtimes: dict[str, dict[str, Any]] = {}
        self._stale: dict[str, int] = {}
        self._tuning: list[dict[str, Any]] = []  # tuning-table entries (from the full index)
        self._table_entries: dict[tuple[str, str, str], list[dict[str, Any]]] = {}  # newest first
        self._table_files: dict[str, TuningTable | None] = {}  # entry key -> parsed table (None: damaged)

    def group(self, group: str) -> list[Candidate]:
        """The servable candidates of one dispatch group in this layer, best first."""
        cands = self._groups.get(group)
        if cands is not None:
            return cands
        with self._lock:
            if group not in self._groups and not self._full:
                views = self._dispatch_views()
                entries = views.group(group) if views.manifest is not None else None
                if entries is not None:
                    self._groups[group] = self._candidates_of(group, entries)
                elif views.signed:
                    self._groups[group] = []
                    self._warn_damaged(group)
                else:
                    self._load_index()
            return self._groups.get(group, [])

    def _dispatch_views(self) -> DispatchViews:
        if self._views is None:
            self._views = DispatchViews(self.root, self.trusted, self._signed_manifest)
            if self._views.manifest is not None:
                self._add_runtimes(self._views.manifest["runtimes"].values())
        return self._views

    def _warn_damaged(self, group: str) -> None:
        """A signed wheel's group file (or manifest) that does not match what its signature covers:
        the wheel serves nothing of that group, and says how to repair it."""
        what = f"dispatch group {group}" if self._views is not None and self._views.manifest else "dispatch manifest"
        warnings.warn(f"kernelforge: kernel {self.label} ({self.root}): its {what} does not match what the wheel's "
                      f"signature covers, so the wheel serves none of it; repair: `pip install --force-reinstall` "
                      f"the kernel wheel, then `kernelforge cache verify`", RuntimeWarning, stacklevel=4)

    def _load_index(self) -> None:
        """Build every group from the index itself (no usable dispatch view)."""
        entries: dict[str, list[dict[str, Any]]] = {}
        runtimes = []
        for entry in load_index_for_runtime(self.root, self.trusted).values():
            if entry.get("kind") == "runtime":
                runtimes.append(entry)
                continue
            if entry.get("kind") == "tuning":
                self._tuning.append(entry)
                continue
            entries.setdefault(entry_group(entry), []).append(entry)
        self._add_runtimes(runtimes, resolved=True)
        for group, members in entries.items():
            self._groups[group] = self._candidates_of(group, members, resolved=True)
        self._full = True

    def load_index_once(self) -> None:
        """Build every group of this layer: from the index, or a signed wheel's from its manifest."""
        if self._signed_manifest is not None:
            with self._lock:
                views = self._dispatch_views()
            for group in (views.manifest or {}).get("groups", ()):
                self.group(group)
            return
        with self._lock:
            if not self._full:
                self._load_index()

    def _add_runtimes(self, entries, resolved: bool = False) -> None:
        layout = Layout(self.root)
        for e in entries:
            e = e if resolved else with_main_path(layout, e)
            if e is not None:
                self._runtimes[e["key"]] = e

    def _candidates_of(self, group: str, entries: list[dict[str, Any]], resolved: bool = False) -> list[Candidate]:
        """Servable candidates of one group: built from this package's kernel sources, best first."""
        layout = Layout(self.root)
        cands = []
        for entry in entries:
            op = entry.get("op", "")
            kc = (entry.get("variant") or {}).get("kclass") or {}
            if op not in OP_SOURCES or entry.get("source_hash") != source_hash(op):
                self._stale[group] = self._stale.get(group, 0) + 1
                continue
            try:
                kclass = KClass.from_dict(kc)
            except SpecError:  # written by another kernelforge version: not servable
                self._stale[group] = self._stale.get(group, 0) + 1
                continue
            entry = entry if resolved else with_main_path(layout, entry)
            if entry is not None:
                arch = (entry.get("variant") or {}).get("axes", {}).get("arch", entry.get("arch", ""))
                cands.append(Candidate(entry, arch, kclass, self))
        # Most specialized K-class first; among equals a build made in this cache before one that
        # arrived signed, before one accepted unsigned (kernelforge.cache.read.origin.origin_rank: an
        # arrival's later date must never shadow a local build), then the newest.
        cands.sort(key=lambda c: (c.kclass.specificity, origin_rank(c.entry.get("extra")),
                                  c.entry.get("created", "")), reverse=True)
        return cands

    def stale(self, group: str) -> int:
        """How many builds of `group` in this layer come from other kernel sources."""
        return self._stale.get(group, 0)

    def tuning_tables(self, device: str, arch_name: str, op: str) -> Iterator[TuningTable]:
        """This layer's tables for (device name, arch, op's sources), newest first. Each is read,
        verified and parsed when the iteration reaches it, once per process: a call the newest
        table covers never reads the older ones (the cost of a fresh process's first call)."""
        for entry in self._tuning_entries(device, arch_name, op):
            table = self._table_file(entry)
            if table is not None:
                yield table

    def _tuning_entries(self, device: str, arch_name: str, op: str) -> list[dict[str, Any]]:
        """The tuning-table entries of (device name, arch, op's sources), newest first."""
        key = (device, arch_name, op)
        if key in self._table_entries:
            return self._table_entries[key]
        if self._signed_manifest is not None:
            with self._lock:
                self._dispatch_views()
        if self._views is None or self._views.manifest is None:
            self.load_index_once()
            entries = self._tuning
        else:
            layout = Layout(self.root)
            entries = [e for e in (with_main_path(layout, t) for t in self._views.manifest.get("tuning", {}).values())
                       if e is not None]
        self._table_entries[key] = table_entries_for(entries, device, arch_name, op)
        return self._table_entries[key]

    def _table_file(self, entry: dict[str, Any]) -> TuningTable | None:
        """One tuning-table entry, read, verified and parsed once per process: every op it covers
        shares it (re-reading the whole table would add to each further op's first call).
        None, with one warning, if it is damaged."""
        key = entry.get("key", "")
        if key in self._table_files:
            return self._table_files[key]
        table = None
        try:
            table = TuningTable(read_verified_json(self.trusted, entry))
        except UntrustedCache:
            raise
        except (CacheError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"kernelforge: ignoring tuning table {entry.get('name')}: {exc}", RuntimeWarning,
                          stacklevel=2)
        self._table_files[key] = table
        return table

    def load(self, cand: Candidate) -> Callable:
        """The loaded function of one of this layer's candidates (module and runtime checksums checked)."""
        fn = load_function(self.trusted, cand.entry,
                           self._runtimes.get(cand.entry.get("extra", {}).get("runtime_key", "")))
        self.usage.record("load", cand.entry.get("op", ""), cand.entry.get("key", ""))  # once per process per entry
        return fn

    def group_entries(self, group: str) -> list[dict[str, Any]]:
        """Every kernel build of `group` in this layer, servable or not (for reports that list the
        stale ones too). A signed wheel's come from its group file, which its signature covers,
        never from its index, which the signature binds by generation and size only; a damaged
        group file lists nothing."""
        if self._signed_manifest is not None:
            with self._lock:
                views = self._dispatch_views()
            found = views.group(group) if views.manifest is not None else None
            return [e for e in found or [] if e.get("kind", "kernel") == "kernel"]
        return [e for e in load_index_for_runtime(self.root, self.trusted).values()
                if e.get("kind") == "kernel" and entry_group(e) == group]

    def groups(self) -> dict[str, list[Candidate]]:
        """Every dispatch group of this layer with its servable candidates (reads the whole index,
        or a signed wheel's every group)."""
        self.load_index_once()
        return dict(self._groups)
