"""Per-arch kernel wheels: one cache layer per arch, installable with pip, found by entry point.

`kernelforge package` writes `kernelforge_kernels_<arch>-<kernelforge version>-py3-none-
manylinux_2_34_<machine>.whl` holding, under the package `kernelforge_kernels_<arch>/`:

```
cache/v1/...                 a read-only cache root: the arch's kernels (plus family "f" builds
                             that run on it), the runtime libraries they link, the arch's tuning
                             tables, an index and its dispatch views
kernelforge_kernels.json     kernelforge version, TVM-FFI ABI, cutlass-dsl versions, toolchain ids
SHA256SUMS                   sha256 of every other file of the package (sha256sum format)
```

Its METADATA pins `Requires-Dist: kernelforge==<version>`; its entry point
`[kernelforge.kernels] <arch> = kernelforge_kernels_<arch>` is how the runtime finds it
(`kernelforge.cache.layers`). Only kernels this kernelforge would serve (built from its kernel
sources) are packaged, and every file is checked against the sha256 the cache recorded.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelforge.cache.entry import Entry
from kernelforge.cache.index import index_text
from kernelforge.cache.layers import (
    ENTRY_POINT_GROUP,
    WHEEL_CACHE_DIR,
    WHEEL_MANIFEST,
    WHEEL_SUMS,
)
from kernelforge.cache.layout import INDEX_NAME, SCHEMA_VERSION
from kernelforge.cache.store import CacheStore
from kernelforge.cache.views import dispatch_views
from kernelforge.errors import CacheError
from kernelforge.release.wheel import WheelFile, write_wheel

MANYLINUX = "manylinux_2_34"  # static cudart needs glibc >= 2.34
_ARCH = re.compile(r"sm_(\d+)(\d)([af]?)$")


@dataclass(frozen=True)
class PackagedWheel:
    """One written kernel wheel."""

    arch: str
    path: Path
    kernels: int
    runtimes: int
    tuning: int
    bytes: int


def dist_name(arch: str) -> str:
    """The distribution name of an arch's kernel wheel: sm_90a -> kernelforge-kernels-sm90a."""
    return "kernelforge-kernels-" + arch.replace("_", "")


def package_name(arch: str) -> str:
    """The import package of an arch's kernel wheel: sm_90a -> kernelforge_kernels_sm90a."""
    return "kernelforge_kernels_" + arch.replace("_", "")


def _runs_on(arch: str, target: str) -> bool:
    """Whether code for `arch` runs on the device `target` names (exact, or a family build)."""
    from kernelforge.runtime.arch import arch_runs_on

    m = _ARCH.match(target)
    if m is None:
        raise ValueError(f"--arch {target!r}: expected an arch like sm_90a")
    return arch == target or (arch.endswith("f") and arch_runs_on(arch, (int(m.group(1)), int(m.group(2)))) > 0)


def _servable(entry: Entry) -> bool:
    from kernelforge.sources import OP_SOURCES, source_hash

    return entry.op in OP_SOURCES and entry.source_hash == source_hash(entry.op)


def default_archs(store: CacheStore) -> list[str]:
    """One wheel per arch-specific ("a") or plain arch of the cache's servable kernels; a family
    ("f") arch gets its own wheel only if no other arch of the cache runs it."""
    archs = {e.arch for e in store.index(fresh=True).values() if e.kind == "kernel" and _servable(e)}
    exact = sorted(a for a in archs if not a.endswith("f"))
    fams = sorted(a for a in archs if a.endswith("f") and not any(_runs_on(a, t) for t in exact if _ARCH.match(t)))
    return exact + fams


def select_entries(entries: dict[str, Entry], arch: str) -> list[Entry]:
    """The entries of `arch`'s wheel: its servable kernels, their runtimes, its tuning tables."""
    kernels = [e for e in entries.values() if e.kind == "kernel" and _servable(e) and _runs_on(e.arch, arch)]
    runtime_keys = {e.extra.get("runtime_key") for e in kernels}
    missing = sorted(str(k)[:12] for k in runtime_keys if k not in entries or entries[k].kind != "runtime")
    if missing:
        raise CacheError(f"kernels of {arch} link runtime libraries the cache does not hold: {', '.join(missing)}; "
                         "run `kernelforge cache verify`")
    runtimes = [entries[k] for k in sorted(runtime_keys)]  # type: ignore[index]
    tuning = [e for e in entries.values() if e.kind == "tuning" and e.arch == arch]
    return sorted(kernels + runtimes + tuning, key=lambda e: (e.kind, e.name, e.key))


def _entry_files(store: CacheStore, entry: Entry) -> dict[str, WheelFile]:
    """Every file of an entry's directory (relative posix path -> content), each recorded one checked."""
    directory = store.entry_dir(entry)
    out: dict[str, WheelFile] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                raise CacheError(f"{path} is a symlink; run `kernelforge cache repair`")
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(directory).as_posix()
            data = path.read_bytes()
            recorded = entry.files.get(rel)
            if recorded is not None and hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
                raise CacheError(f"{entry.name}: {rel} does not match its recorded sha256; "
                                 f"run `kernelforge build --verify --cache {store.root}`")
            out[rel] = WheelFile(data, bool(os.stat(path).st_mode & stat.S_IXUSR))
    missing = sorted(set(entry.files) - set(out))
    if missing:
        raise CacheError(f"{entry.name}: recorded file(s) missing: {', '.join(missing)}")
    return out


def toolchain_record(selected: list[Entry]) -> dict[str, Any]:
    """What the wheel's artifacts were built with (one TVM-FFI ABI, or CacheError)."""
    built = [e for e in selected if e.kind == "kernel"]
    abis = sorted({str(e.toolchain.get("tvm_ffi_abi")) for e in built})
    if len(abis) > 1:
        raise CacheError(f"the selected kernels were built for several TVM-FFI ABIs ({', '.join(abis)}); "
                         "clean the cache (`kernelforge cache clean --stale`) and rebuild")
    dsl: dict[str, str] = {}
    for e in built:
        dsl.update(e.toolchain.get("cutlass_dsl") or {})
    return {"tvm_ffi_abi": abis[0] if abis else "", "cutlass_dsl": dict(sorted(dsl.items())),
            "toolchain_ids": sorted({e.toolchain_id for e in built})}


def package_arch(store: CacheStore, arch: str, out_dir: Path) -> PackagedWheel:
    """Write the kernel wheel of `arch` from `store` into `out_dir` (see the module docstring)."""
    from kernelforge import __version__

    entries = store.index(fresh=True)
    selected = select_entries(entries, arch)
    if not any(e.kind == "kernel" for e in selected):
        raise CacheError(f"the cache {store.root} holds no kernel of {arch} built from this kernelforge's sources")
    pkg = package_name(arch)
    files: dict[str, WheelFile] = {}
    schema = f"{pkg}/{WHEEL_CACHE_DIR}/v{SCHEMA_VERSION}"
    for entry in selected:
        for rel, f in _entry_files(store, entry).items():
            files[f"{schema}/{entry.path}/{rel}"] = f
    raw = {e.key: e.to_json() for e in selected}
    # The generation id is derived from the content, so the same cache gives the same wheel.
    generation = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:32]
    text = index_text(raw, generation)
    files[f"{schema}/{INDEX_NAME}"] = WheelFile(text.encode("utf-8"))
    groups, manifest_obj = dispatch_views(raw, generation, len(text.encode("utf-8")))
    files[f"{schema}/dispatch/manifest.json"] = WheelFile(
        json.dumps(manifest_obj, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    for name, payload in groups.items():
        files[f"{schema}/dispatch/groups/{name}"] = WheelFile(payload.encode("utf-8"))
    counts = {kind: sum(e.kind == kind for e in selected) for kind in ("kernel", "runtime", "tuning")}
    record = {"schema": 1, "distribution": dist_name(arch), "kernelforge": __version__, "arch": arch,
              "archs": sorted({e.arch for e in selected if e.kind == "kernel"}), "entries": counts,
              **toolchain_record(selected)}
    files[f"{pkg}/{WHEEL_MANIFEST}"] = WheelFile((json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    files[f"{pkg}/__init__.py"] = WheelFile(
        f'"""Prebuilt kernelforge kernels for {arch}: a read-only cache layer under cache/ '
        f'(found through the {ENTRY_POINT_GROUP!r} entry point; nothing to import)."""\n'.encode())
    sums = "".join(f"{hashlib.sha256(f.data).hexdigest()}  {path[len(pkg) + 1:]}\n"
                   for path, f in sorted(files.items()))
    files[f"{pkg}/{WHEEL_SUMS}"] = WheelFile(sums.encode("ascii"))
    description = (f"kernelforge {__version__} kernels for {arch}: {counts['kernel']} kernels, "
                   f"{counts['runtime']} runtime libraries, {counts['tuning']} tuning tables.\n"
                   f"Built with TVM-FFI ABI {record['tvm_ffi_abi']}, "
                   + ", ".join(f"{k} {v}" for k, v in record["cutlass_dsl"].items())
                   + f"; toolchain {', '.join(t[:16] for t in record['toolchain_ids'])}.\n")
    tag = f"py3-none-{MANYLINUX}_{platform.machine()}"
    path = write_wheel(out_dir, dist_name(arch), __version__, tag, files,
                       metadata=[("Summary", f"Prebuilt kernelforge kernels for {arch}"),
                                 ("Requires-Python", ">=3.10"), ("Requires-Dist", f"kernelforge=={__version__}")],
                       entry_points={ENTRY_POINT_GROUP: {arch: pkg}}, description=description)
    return PackagedWheel(arch, path, counts["kernel"], counts["runtime"], counts["tuning"], path.stat().st_size)


def sums_problems(package_dir: Path) -> list[str]:
    """What disagrees with an installed kernel wheel's SHA256SUMS (files changed, missing, added)."""
    try:
        lines = (package_dir / WHEEL_SUMS).read_text(encoding="ascii").splitlines()
    except (OSError, ValueError) as exc:
        return [f"{WHEEL_SUMS} unreadable ({exc})"]
    listed: dict[str, str] = {}
    for line in lines:
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    out = []
    for rel, digest in sorted(listed.items()):
        path = package_dir / rel
        try:
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            out.append(f"{rel}: missing")
            continue
        if actual != digest:
            out.append(f"{rel}: sha256 differs from {WHEEL_SUMS}")
    for path in sorted((package_dir / WHEEL_CACHE_DIR).rglob("*")):
        rel = path.relative_to(package_dir).as_posix()
        if path.is_file() and rel not in listed:
            out.append(f"{rel}: not listed in {WHEEL_SUMS}")
    return out
