"""Kernel wheels: per arch and per distribution, a cache layer installable with pip, found by entry point.

`kernelforge package` writes one wheel per arch for kernelforge's own ops, and one per arch for
each installed op-family plugin whose kernels the cache holds, so that pip never replaces one
with the other:

```
kernelforge_kernels_sm90a-<kernelforge version>-cp310-abi3-manylinux_2_34_x86_64.whl
    built-in ops; distribution kernelforge-kernels-sm90a, package kernelforge_kernels_sm90a
kernelforge_silu_quant_kernels_sm90a-<plugin version>-cp310-abi3-manylinux_2_34_x86_64.whl
    the ops of the plugin distribution kernelforge-silu-quant; package kernelforge_silu_quant_kernels_sm90a
```

The tag says what the wheel holds: the runtime library is a CPython extension of the stable ABI
(`Py_LIMITED_API` of kernelforge/build/launch.c: 0x030A0000 -> cp310-abi3), and manylinux_2_34
is checked on the files: every ELF file going into the wheel is read (`kernelforge.release.elf`)
and one needing a newer GLIBC (GLIBCXX, CXXABI) than the policy allows refuses the wheel. The
machine comes from the ELF headers; nothing is taken from the build host.

Under its package, a wheel holds:

```
cache/v1/...                 a read-only cache root: the arch's kernels of the distribution's ops
                             (plus family "f" builds that run on it), the runtime libraries they
                             link, the tuning tables of those ops, an index and its dispatch views
kernelforge_kernels.json     its distribution, the plugin distributions and versions it serves,
                             kernelforge version, TVM-FFI ABI, cutlass-dsl versions, toolchain ids
SHA256SUMS                   sha256 of every other file of the package (sha256sum format)
```

Its METADATA pins `Requires-Dist: kernelforge==<version>` (and `<plugin>==<plugin version>` for a
plugin's wheel); its entry point `[kernelforge.kernels] <package> = <package>` (a name unique per
wheel) is how the runtime finds it (`kernelforge.cache.read.layers`). Only kernels this kernelforge
would serve (built from its kernel sources, or the installed plugin's) are packaged, and every
file is checked against the sha256 the cache recorded.

The same cache gives byte-identical wheels, and so do two builds of the same selection: the
measurements that differ between builds are normalised in the wheel (every entry's
`build_time_s` is 0.0 and `created` is $SOURCE_DATE_EPOCH, or 1970-01-01 when unset), and its
meta.json files, index and dispatch views are all written from the normalised entries, so that
`cache verify` and the runtime's agreement checks hold on the installed wheel.

For a caller (a signing step, say): `plan_wheels` lists the wheels to write, `wheel_files`
builds one wheel's complete package files (its optional `extra_files(sha256sums_bytes)` adds
files next to SHA256SUMS, e.g. a signature of it), `write_kernel_wheel` checks and writes them;
`package_wheel` and `package_arch` do both.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.index import index_text
from kernelforge.cache.read.layers import (
    ENTRY_POINT_GROUP,
    WHEEL_CACHE_DIR,
    WHEEL_MANIFEST,
    WHEEL_SUMS,
)
from kernelforge.cache.read.layout import INDEX_NAME, META_NAME, SCHEMA_VERSION
from kernelforge.cache.read.views import MANIFEST, VIEWS_DIR, dispatch_views
from kernelforge.cache.store import CacheStore
from kernelforge.errors import CacheError
from kernelforge.release.elf import MANYLINUX, check_manylinux

if TYPE_CHECKING:
    from packaging.tags import Tag

    from kernelforge.release.wheel import WheelMember
# kernelforge.release.wheel (packaging, wheel) is imported where a wheel is written. An installed
# wheel is checked against its SHA256SUMS by the cache (`cache.maintenance.verification.sums_problems`),
# on runtime-only nodes too, which have neither.

_ARCH = re.compile(r"sm_(\d+)(\d)([af]?)$")
LAUNCH_SOURCE = Path(__file__).resolve().parents[1] / "build" / "launch.c"  # the extension's C source
BUILTIN = "kernelforge"  # the distribution of the built-in ops
# Called with the bytes of a wheel's SHA256SUMS; returns more files for its package ({relative path: bytes}).
ExtraFiles = Callable[[bytes], Mapping[str, bytes]]


@dataclass(frozen=True)
class KernelWheel:
    """One kernel wheel to write: the kernels of one distribution's ops for one arch.

    `family_distribution`/`family_version` are the plugin distribution whose ops it serves ("" for
    kernelforge's built-in ops); `version` is the wheel's own (the plugin's version, or
    kernelforge's); `entries` its kernels, their runtime libraries and its ops' tuning tables."""

    arch: str
    family_distribution: str
    family_version: str
    version: str
    entries: tuple[Entry, ...]

    @property
    def distribution(self) -> str:
        return dist_name(self.arch, self.family_distribution)

    @property
    def package(self) -> str:
        return package_name(self.arch, self.family_distribution)

    def count(self, kind: str) -> int:
        return sum(e.kind == kind for e in self.entries)


@dataclass(frozen=True)
class PackagedWheel:
    """One written kernel wheel."""

    arch: str
    distribution: str
    path: Path
    kernels: int
    runtimes: int
    tuning: int
    bytes: int


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def dist_name(arch: str, family_distribution: str = "") -> str:
    """The distribution name of a kernel wheel: sm_90a -> kernelforge-kernels-sm90a; a plugin's,
    ("sm_90a", "kernelforge-silu-quant") -> kernelforge-silu-quant-kernels-sm90a."""
    owner = _canonical(family_distribution) if family_distribution else BUILTIN
    return _canonical(f"{owner}-kernels-{arch.replace('_', '')}")


def package_name(arch: str, family_distribution: str = "") -> str:
    """The import package of a kernel wheel: sm_90a -> kernelforge_kernels_sm90a (the distribution
    name with - as _)."""
    return dist_name(arch, family_distribution).replace("-", "_")


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


def op_distribution(op: str) -> tuple[str, str] | None:
    """(distribution, version) of the plugin defining `op`; ("", "") for a built-in op; None if unknown."""
    from kernelforge.registry import find_family

    fam = find_family(op)
    if fam is None:
        return None
    return (_canonical(fam.distribution), fam.version) if fam.distribution else ("", "")


def default_archs(store: CacheStore) -> list[str]:
    """One wheel per arch-specific ("a") or plain arch of the cache's servable kernels; a family
    ("f") arch gets its own wheel only if no other arch of the cache runs it."""
    archs = {e.arch for e in store.index(fresh=True).values() if e.kind == "kernel" and _servable(e)}
    exact = sorted(a for a in archs if not a.endswith("f"))
    fams = sorted(a for a in archs if a.endswith("f") and not any(_runs_on(a, t) for t in exact if _ARCH.match(t)))
    return exact + fams


def table_sources(entry: Entry) -> dict:
    """The kernel sources a tuning table's entry records, op -> source hash ({} if none)."""
    sources = (entry.variant.get("axes") or {}).get("sources")
    return sources if isinstance(sources, dict) else {}


def table_ops(entry: Entry) -> list[str]:
    """The ops a tuning table tunes: those whose kernel sources it records (its entry's `op` is
    "tuning", one table serving every op measured on a device)."""
    return sorted(table_sources(entry)) or [entry.op]


def select_entries(entries: dict[str, Entry], arch: str, distribution: str | None = None) -> list[Entry]:
    """The entries of `arch`'s wheel of `distribution` ("" the built-in ops, a plugin's canonical
    name, None every distribution): its servable kernels, their runtimes, and the tuning tables of
    arch that tune an op of the distribution (`table_ops`; a table of several distributions' ops
    goes into each of their wheels) that the runtime would read for them (`serving_tables`)."""

    def ours(op: str) -> bool:
        owner = op_distribution(op)
        return owner is not None and (distribution is None or owner[0] == distribution)

    kernels = [e for e in entries.values()
               if e.kind == "kernel" and _servable(e) and _runs_on(e.arch, arch) and ours(e.op)]
    runtime_keys = {e.extra.get("runtime_key") for e in kernels}
    missing = sorted(str(k)[:12] for k in runtime_keys if k not in entries or entries[k].kind != "runtime")
    if missing:
        raise CacheError(f"kernels of {arch} link runtime libraries the cache does not hold: {', '.join(missing)}; "
                         "run `kernelforge cache verify`")
    runtimes = [entries[k] for k in sorted(runtime_keys)]  # type: ignore[index]
    tables = [e for e in entries.values() if e.kind == "tuning" and e.arch == arch and any(map(ours, table_ops(e)))]
    tuning = serving_tables(tables, {(e.op, e.source_hash) for e in kernels})
    return sorted(kernels + runtimes + tuning, key=lambda e: (e.kind, e.name, e.key))


def serving_tables(tables: list[Entry], shipped: set[tuple[str, str]]) -> list[Entry]:
    """The tuning tables the runtime can read for the shipped kernels (`(op, source hash)` pairs).

    The runtime reads an op's choices only from a table that records the op's kernel sources
    (`runtime.tuning.table_entries_for`), so a table measured on other sources (an edited kernel,
    re-tuned since) or one that records none would only add bytes to every install. An older
    table of the same card stays: the runtime falls back to it for the cells a newer (partial)
    table does not cover.
    """
    return [t for t in tables if any((op, h) in shipped for op, h in table_sources(t).items())]


def _matches(wanted: Iterable[str], family_distribution: str, arch: str) -> bool:
    names = {_canonical(w) for w in wanted}
    return _canonical(family_distribution or BUILTIN) in names or dist_name(arch, family_distribution) in names


def plan_wheels(store: CacheStore, archs: Iterable[str] | None = None, *,
                distributions: Iterable[str] | None = None) -> list[KernelWheel]:
    """The kernel wheels to write from `store`: per arch (default: `default_archs`), one per
    distribution whose servable kernels of that arch the cache holds, built-ins first.

    `distributions` keeps only those named, by family distribution ("kernelforge" for the
    built-ins, "kernelforge-silu-quant") or by wheel distribution ("kernelforge-kernels-sm90a").
    CacheError when an arch named in `archs` gives no wheel."""
    from kernelforge import __version__

    entries = store.index(fresh=True)
    explicit = archs is not None
    wanted = None if distributions is None else list(distributions)
    out: list[KernelWheel] = []
    for arch in (list(archs) if explicit else default_archs(store)):  # type: ignore[arg-type]
        kernels = select_entries(entries, arch)
        owners: dict[str, set[str]] = {}
        for e in kernels:
            if e.kind == "kernel":
                dist, version = op_distribution(e.op) or ("", "")
                owners.setdefault(dist, set()).add(version)
        planned = []
        for dist in sorted(owners):
            versions = sorted(owners[dist])
            if len(versions) > 1:
                raise CacheError(f"the ops of {dist} report several versions ({', '.join(versions)})")
            if wanted is not None and not _matches(wanted, dist, arch):
                continue
            planned.append(KernelWheel(arch, dist, versions[0], versions[0] if dist else __version__,
                                       tuple(select_entries(entries, arch, dist))))
        if explicit and not planned:
            which = "" if wanted is None else f" (of {', '.join(wanted)})"
            raise CacheError(f"the cache {store.root} holds no kernel of {arch}{which} built from the "
                             "installed kernel sources")
        out.extend(planned)
    return out


def normalised(entry: Entry, created: str) -> Entry:
    """`entry` as a wheel records it: `build_time_s` 0.0 and `created` fixed (see the module
    docstring), and an arrival's `origin` without the builder-local path it came from (a
    temporary shard directory differs on every build); every other field as the cache has it."""
    from kernelforge.cache.read.origin import ORIGIN, origin_of

    origin = origin_of(entry.extra)
    extra = entry.extra if origin is None else {**entry.extra, ORIGIN: {k: v for k, v in origin.items() if k != "from"}}
    return dataclasses.replace(entry, build_time_s=0.0, created=created, extra=extra)


def _meta_bytes(entry: Entry) -> bytes:
    """meta.json as the store writes it (`CacheStore.publish`)."""
    return json.dumps(entry.to_json(), indent=1, sort_keys=True).encode("utf-8")


def _entry_files(store: CacheStore, entry: Entry) -> dict[str, WheelMember]:
    """Every file of an entry's directory (relative posix path -> content), each recorded one
    checked; meta.json is left to the caller (it writes the normalised one)."""
    from kernelforge.release.wheel import WheelMember

    directory = store.entry_dir(entry)
    out: dict[str, WheelMember] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                raise CacheError(f"{path} is a symlink; run `kernelforge cache repair`")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(directory).as_posix()
            if rel == META_NAME:
                continue
            data = path.read_bytes()
            recorded = entry.files.get(rel)
            if recorded is not None and hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
                raise CacheError(f"{entry.name}: {rel} does not match its recorded sha256; "
                                 f"run `kernelforge build --verify --cache {store.root}`")
            out[rel] = WheelMember(data, bool(os.stat(path).st_mode & stat.S_IXUSR))
    missing = sorted(set(entry.files) - set(out))
    if missing:
        raise CacheError(f"{entry.name}: recorded file(s) missing: {', '.join(missing)}")
    return out


def toolchain_record(selected: Iterable[Entry]) -> dict[str, Any]:
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


def manifest_record(wheel: KernelWheel) -> dict[str, Any]:
    """The wheel's kernelforge_kernels.json: what `kernelforge.cache.read.layers.compatibility_problem` checks."""
    from kernelforge import __version__

    kernels = [e for e in wheel.entries if e.kind == "kernel"]
    return {"schema": 1, "distribution": wheel.distribution, "kernelforge": __version__, "arch": wheel.arch,
            "archs": sorted({e.arch for e in kernels}),
            "entries": {kind: wheel.count(kind) for kind in ("kernel", "runtime", "tuning")},
            # The plugin distributions whose ops it serves, and their versions ({} for the built-ins).
            "families": {wheel.family_distribution: wheel.family_version} if wheel.family_distribution else {},
            "ops": sorted({e.op for e in kernels}), **toolchain_record(wheel.entries)}


def wheel_files(store: CacheStore, wheel: KernelWheel, *, epoch: int | None = None,
                extra_files: ExtraFiles | None = None, signer: Any = None) -> dict[str, WheelMember]:
    """The complete package files of `wheel` (archive path -> content), SHA256SUMS included.

    `epoch` is the normalised `created` of every entry (seconds; None: 1970-01-01). `extra_files`,
    if given, is called once with the bytes of SHA256SUMS and returns more files for the package
    ({path relative to the package: bytes}, e.g. {"SHA256SUMS.sig": ...}); they may not replace a
    file or go under cache/ (every file there is listed in SHA256SUMS). `signer` (a SigningKey)
    adds SIGNATURE.json, the release key's statement over SHA256SUMS and the dispatch manifest
    and index (`kernelforge.cache.read.wheel_signature`). The signed manifests that vouch for the
    entries' origins go under cache/v1/signatures/, so `cache verify` re-checks them on the node."""
    from kernelforge.cache.read.signing import SIGNATURES_DIR
    from kernelforge.cache.transfer.provenance import covering_manifests
    from kernelforge.release.wheel import WheelMember, epoch_iso

    if not any(e.kind == "kernel" for e in wheel.entries):
        raise CacheError(f"{wheel.distribution}: no kernel to package")
    created = epoch_iso(epoch)
    entries = [normalised(e, created) for e in wheel.entries]
    pkg = wheel.package
    files: dict[str, WheelMember] = {}
    schema = f"{pkg}/{WHEEL_CACHE_DIR}/v{SCHEMA_VERSION}"
    for entry in entries:
        for rel, f in _entry_files(store, entry).items():
            files[f"{schema}/{entry.path}/{rel}"] = f
        files[f"{schema}/{entry.path}/{META_NAME}"] = WheelMember(_meta_bytes(entry))
    raw = {e.key: e.to_json() for e in entries}
    # The generation id is derived from the content, so the same entries give the same wheel.
    generation = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:32]
    text = index_text(raw, generation)
    files[f"{schema}/{INDEX_NAME}"] = WheelMember(text.encode("utf-8"))
    groups, views_manifest = dispatch_views(raw, generation, len(text.encode("utf-8")))
    files[f"{schema}/{VIEWS_DIR}/{MANIFEST}"] = WheelMember(
        json.dumps(views_manifest, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    for name, payload in groups.items():
        files[f"{schema}/{VIEWS_DIR}/groups/{name}"] = WheelMember(payload.encode("utf-8"))
    for name, document in covering_manifests(store, raw):
        files[f"{schema}/{SIGNATURES_DIR}/{name}"] = WheelMember(document)
    files[f"{pkg}/{WHEEL_MANIFEST}"] = WheelMember(
        (json.dumps(manifest_record(wheel), indent=1, sort_keys=True) + "\n").encode())
    files[f"{pkg}/__init__.py"] = WheelMember(
        f'"""Prebuilt kernelforge kernels ({wheel.distribution}): a read-only cache layer under cache/ '
        f'(found through the {ENTRY_POINT_GROUP!r} entry point; nothing to import)."""\n'.encode())
    sums = "".join(f"{hashlib.sha256(f.data).hexdigest()}  {path[len(pkg) + 1:]}\n"
                   for path, f in sorted(files.items())).encode("ascii")
    files[f"{pkg}/{WHEEL_SUMS}"] = WheelMember(sums)
    if signer is not None:
        from kernelforge.cache.read.signing import sign_statement
        from kernelforge.cache.read.wheel_signature import SIGNATURE_FILE, wheel_statement

        statement = wheel_statement(wheel.distribution, sums, files[f"{schema}/{VIEWS_DIR}/{MANIFEST}"].data,
                                    files[f"{schema}/{INDEX_NAME}"].data)
        files[f"{pkg}/{SIGNATURE_FILE}"] = WheelMember(sign_statement(signer, statement))
    for rel, data in (extra_files(sums) if extra_files is not None else {}).items():
        path = f"{pkg}/{rel}"
        if path in files or rel.split("/")[0] == WHEEL_CACHE_DIR:
            raise CacheError(f"{wheel.distribution}: extra file {rel!r} would replace a packaged file "
                             f"or go under {WHEEL_CACHE_DIR}/")
        files[path] = WheelMember(bytes(data))
    return files


def limited_api_version(source: Path = LAUNCH_SOURCE) -> tuple[int, int]:
    """(major, minor) of the `Py_LIMITED_API` the runtime library's launcher is compiled with."""
    m = re.search(r"^#define\s+Py_LIMITED_API\s+0x([0-9A-Fa-f]{2})([0-9A-Fa-f]{2})[0-9A-Fa-f]{4}\b",
                  source.read_text(encoding="utf-8"), re.M)
    if m is None:
        raise CacheError(f"{source}: no `#define Py_LIMITED_API 0x........`, so the wheel's ABI tag is unknown")
    return int(m.group(1), 16), int(m.group(2), 16)


def wheel_tag(machine: str, source: Path = LAUNCH_SOURCE) -> Tag:
    """The kernel wheels' tag: cp<limited API>-abi3-manylinux_2_34_<machine>, e.g.
    cp310-abi3-manylinux_2_34_x86_64 (ValueError if it is not one packaging parses back)."""
    from packaging.tags import Tag, parse_tag

    major, minor = limited_api_version(source)
    tag = Tag(f"cp{major}{minor}", "abi3", f"{MANYLINUX}_{machine}")
    if parse_tag(str(tag)) != frozenset({tag}) or not re.fullmatch(r"manylinux_\d+_\d+_[a-z0-9_]+", tag.platform):
        raise ValueError(f"{tag} is not a valid wheel tag")
    return tag


def write_kernel_wheel(wheel: KernelWheel, files: Mapping[str, WheelMember], out_dir: Path, *,
                       epoch: int | None = None) -> PackagedWheel:
    """Check `files` (from `wheel_files`) against the manylinux policy and write the wheel into
    `out_dir`, its members stamped with `epoch` (see `kernelforge.release.wheel.zip_date_time`)."""
    from kernelforge import __version__
    from kernelforge.release.wheel import write_wheel, zip_date_time

    machine, _ = check_manylinux((path, f.data) for path, f in sorted(files.items()))
    tag = wheel_tag(machine)
    major, minor = limited_api_version()
    record = manifest_record(wheel)
    counts = record["entries"]
    owner = f"{wheel.family_distribution} {wheel.family_version}" if wheel.family_distribution \
        else f"kernelforge {__version__}"
    requires = [("Requires-Dist", f"kernelforge=={__version__}")]
    if wheel.family_distribution:
        requires.append(("Requires-Dist", f"{wheel.family_distribution}=={wheel.family_version}"))
    description = (f"{owner} kernels for {wheel.arch}: {counts['kernel']} kernels, "
                   f"{counts['runtime']} runtime libraries, {counts['tuning']} tuning tables.\n"
                   f"For kernelforge {__version__}; built with TVM-FFI ABI {record['tvm_ffi_abi']}, "
                   + ", ".join(f"{k} {v}" for k, v in record["cutlass_dsl"].items())
                   + f"; toolchain {', '.join(t[:16] for t in record['toolchain_ids'])}.\n")
    path = write_wheel(out_dir, wheel.distribution, wheel.version, tag, files,
                       metadata=[("Summary", f"Prebuilt {owner.split()[0]} kernels for {wheel.arch}"),
                                 ("Requires-Python", f">={major}.{minor}"), *requires],
                       entry_points={ENTRY_POINT_GROUP: {wheel.package: wheel.package}},
                       description=description, date_time=zip_date_time(epoch),
                       generator=f"kernelforge {__version__}")
    return PackagedWheel(wheel.arch, wheel.distribution, path, counts["kernel"], counts["runtime"],
                         counts["tuning"], path.stat().st_size)


def package_wheel(store: CacheStore, wheel: KernelWheel, out_dir: Path, *,
                  extra_files: ExtraFiles | None = None, signer: Any = None) -> PackagedWheel:
    """`wheel_files` then `write_kernel_wheel`, both with $SOURCE_DATE_EPOCH."""
    from kernelforge.release.wheel import source_date_epoch

    epoch = source_date_epoch()
    return write_kernel_wheel(wheel, wheel_files(store, wheel, epoch=epoch, extra_files=extra_files, signer=signer),
                              out_dir, epoch=epoch)


def package_arch(store: CacheStore, arch: str, out_dir: Path, *, distributions: Iterable[str] | None = None,
                 extra_files: ExtraFiles | None = None, signer: Any = None) -> list[PackagedWheel]:
    """Write the kernel wheels of `arch` from `store` into `out_dir`: one per distribution (see
    `plan_wheels`), built-ins first."""
    return [package_wheel(store, w, out_dir, extra_files=extra_files, signer=signer)
            for w in plan_wheels(store, [arch], distributions=distributions)]

