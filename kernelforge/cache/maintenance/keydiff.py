"""Why a key is not in the cache: the difference between what a key is made of (variant, kernel
sources, toolchain) and the nearest cached entry, like ccache's debug output of a miss.

Pure dict comparisons on Entry metadata (imports neither the build toolchain nor the specs).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from kernelforge.cache.read.entry import Entry


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, Mapping):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def dict_diff(old: Any, new: Any) -> list[str]:
    """'a.b: X -> Y' for every leaf that differs (a missing leaf shows as None)."""
    a, b = _flat(old), _flat(new)
    return [f"{k}: {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def nearest_entry(entries: Iterable[Entry], name: str, op: str, arch: str,
                  canonical: Mapping[str, Any]) -> Entry | None:
    """The cached kernel closest to a variant: the newest of the same name, else the same op and
    arch with the most equal axes (then the newest)."""
    kernels = [e for e in entries if e.kind == "kernel" and e.op == op]
    same = [e for e in kernels if e.name == name]
    if same:
        return max(same, key=lambda e: e.created)
    axes = _flat(canonical)
    pool = [e for e in kernels if e.arch == arch]
    if not pool:
        return None
    return max(pool, key=lambda e: (sum(_flat(e.variant).get(k) == v for k, v in axes.items()), e.created))


def key_diff(entry: Entry, canonical: Mapping[str, Any], src_hash: str,
             toolchain: Mapping[str, Any]) -> list[str]:
    """What differs between a cached entry and a variant's key ingredients, one line per change."""
    out = []
    if entry.name != canonical.get("name", entry.name):
        out.append(f"variant name: {entry.name}")
    out += [f"variant {line}" for line in dict_diff(entry.variant, canonical)]
    if entry.source_hash != src_hash:
        out.append(f"kernel sources of {entry.op} changed: source hash {entry.source_hash[:12]} -> {src_hash[:12]}")
    out += [f"toolchain {line}" for line in dict_diff(entry.toolchain, toolchain)]
    return out


def miss_reason(entries: Iterable[Entry], name: str, op: str, arch: str, canonical: Mapping[str, Any],
                src_hash: str, toolchain: Mapping[str, Any]) -> str:
    """One line: why a variant's key is not cached (what changed against the nearest entry)."""
    near = nearest_entry(entries, name, op, arch, canonical)
    if near is None:
        return "not built before (no cached build of this op and arch)"
    diff = key_diff(near, canonical, src_hash, toolchain)
    whose = "its last build" if near.name == name else f"the nearest cached build {near.name}"
    if not diff:
        return f"key changed against {whose} [{near.key[:12]}] (entry format)"
    more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
    return f"changed since {whose} [{near.key[:12]}]: " + "; ".join(diff[:3]) + more
