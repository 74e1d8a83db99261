"""Check that the cache is what its index says: every file, every reference, the views, the modes.

Verify passes only if the runtime would load exactly the indexed bytes: the index parses;
every entry lives where its key says, its files are regular files (no symlinks) with the
recorded sizes and sha256, and its meta.json agrees with the index; every kernel's runtime
library is indexed; the dispatch views are the ones the index implies; nothing on disk is a
recorded entry the index lost; and every path passes the ownership policy (unless
$KERNELFORGE_TRUST_SHARED_CACHE is set). Debris (dirs without a usable meta.json, staging
dirs of dead builders) is informational: `cache clean` removes it.

Entries that arrived signed (`cache.transfer.provenance` accepted them) are checked again here:
`unproven_arrivals` and `revoked_arrivals` are what verify reports and repair quarantines. A
layer (`cache.read.layers`) is verified with `verify_layer`: an installed kernel wheel's files
are also checked against its SHA256SUMS (`sums_problems`).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import ARTIFACT_LIMIT_ENV, max_artifact_bytes, read_regular, special_kind
from kernelforge.cache.read.index import index_generation, read_index_checked
from kernelforge.cache.read.integrity import (  # noqa: F401
    MISSING_DIR,
    MISSING_FILE,
    NOT_A_FILE,
    SHA_MISMATCH,
    SIZE_MISMATCH,
    file_problems,
)
from kernelforge.cache.read.layers import WHEEL_CACHE_DIR, WHEEL_SUMS, Layer
from kernelforge.cache.read.layout import META_NAME, Layout
from kernelforge.cache.read.origin import origin_of
from kernelforge.cache.read.signing import (
    SIGNATURES_DIR,
    SigningError,
    TrustedKeys,
    read_manifests,
    trusted_keys,
    verify_manifest,
)
from kernelforge.cache.read.table_schema import validate_table
from kernelforge.cache.read.trust import ownership_problem
from kernelforge.cache.read.views import MANIFEST, VIEWS_DIR, dispatch_views
from kernelforge.cache.store import CacheStore

MISSING_ROOT = "missing cache root"
BAD_INDEX = "unusable index"
BAD_META = "meta.json disagrees"
NO_RUNTIME = "runtime library not indexed"
STALE_VIEWS = "dispatch views disagree with the index"
UNINDEXED = "entry not in the index"
UNTRUSTED = "untrusted path"
BAD_SIGNATURE = "signature does not hold"
BAD_TABLE = "not a valid tuning table"
SPECIAL = "not a regular file"  # a FIFO, socket or device anywhere in the cache


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one entry (or with the cache as a whole: key "")."""

    key: str
    name: str
    problem: str
    file: str = ""
    detail: str = ""

    def __str__(self) -> str:
        where = f" {self.file}" if self.file else ""
        detail = f" ({self.detail})" if self.detail else ""
        who = f"{self.name} [{self.key[:12]}]: " if self.key else ""
        return f"{who}{self.problem}{where}{detail}"


@dataclass
class VerifyReport:
    """Result of `verify`: problems make it fail; orphans (debris) are informational."""

    root: Path
    entries: int = 0
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    orphans: list[Path] = field(default_factory=list)
    signed: dict[str, int] = field(default_factory=dict)  # key id -> entries whose origin it signed
    unsigned: list[str] = field(default_factory=list)  # names of entries accepted unsigned (opted in)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root), "ok": self.ok, "entries": self.entries, "files": self.files,
            "problems": [vars(p) for p in self.problems], "orphans": [str(p) for p in self.orphans],
            "signed": self.signed, "unsigned": self.unsigned,
        }


def verify(store: CacheStore) -> VerifyReport:
    """Check the whole cache (see the module docstring)."""
    report = VerifyReport(root=store.root)
    if not store.root.is_dir():
        report.problems.append(Problem("", "", MISSING_ROOT, str(store.root),
                                       "not a directory" if store.root.exists() else "does not exist"))
        return report
    raw, problem = read_index_checked(store.layout.index)
    if problem:
        report.problems.append(Problem("", "", BAD_INDEX, detail=problem))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each malformed entry is reported below
        entries = store.index(fresh=True)
    for key in raw:
        if key not in entries:
            report.problems.append(Problem(key, str((raw[key] or {}).get("name", "?")) if isinstance(raw[key], dict)
                                           else "?", BAD_INDEX, detail="malformed entry (wrong path, names or fields)"))
    runtimes = {k for k, e in entries.items() if e.kind == "runtime"}
    # Files whose damage a check below already names (each problem is reported once).
    covered = {store.layout.index} if problem else set()
    for entry in sorted(entries.values(), key=lambda e: (e.kind, e.name, e.key)):
        report.entries += 1
        report.files += len(entry.files)
        directory = store.entry_dir(entry)
        covered.update(directory / rel for rel in (*entry.files, META_NAME))
        for kind, file, detail in entry_file_problems(store, entry, directory):
            report.problems.append(Problem(entry.key, entry.name, kind, file, detail))
        rkey = entry.extra.get("runtime_key")
        if entry.kind == "kernel" and rkey is not None and rkey not in runtimes:
            report.problems.append(Problem(entry.key, entry.name, NO_RUNTIME, detail=str(rkey)[:12]))
    if not problem:
        views = view_problems(store, raw)
        report.problems.extend(views)
        covered.update(store.layout.schema_root / VIEWS_DIR / p.file for p in views if p.file)
    for path, kind in special_files(store):
        if path not in covered:
            report.problems.append(Problem("", "", SPECIAL, str(path), f"{kind}; `kernelforge cache repair` moves "
                                                                      "it to quarantine/"))
    for directory, meta in store.unindexed():
        if meta is not None:
            report.problems.append(Problem(meta.key, meta.name, UNINDEXED, detail=str(directory)))
    for path, why in trust_problems(store):
        report.problems.append(Problem("", "", UNTRUSTED, str(path), why))
    signature_problems(store, entries, report)
    report.orphans = store.orphans()
    return report


def signature_problems(store: CacheStore, entries: dict[str, Entry], report: VerifyReport) -> None:
    """Entries that arrived signed are checked again: a manifest of their signer in v1/signatures/
    must verify and list their exact bytes, and the signer must still be trusted (where trusted
    keys are configured). A manifest whose signature fails is a problem of its own."""
    arrivals = {k: o for k, e in entries.items() if (o := origin_of(e.extra)) is not None}
    unproven, bad = unproven_arrivals(store, entries)
    report.problems.extend(Problem("", "", BAD_SIGNATURE, file, why) for file, why in bad)
    if not arrivals:
        return
    try:
        trusted = trusted_keys()
    except SigningError as exc:
        report.problems.append(Problem("", "", BAD_SIGNATURE, detail=f"trusted keys unusable: {exc}"))
        trusted = None
    revoked = revoked_arrivals({k: entries[k] for k in arrivals if k not in unproven}, trusted)
    for key, origin in sorted(arrivals.items()):
        entry, signer = entries[key], origin.get("signer")
        if not signer:
            report.unsigned.append(entry.name)
        elif key in unproven:
            report.problems.append(Problem(key, entry.name, BAD_SIGNATURE, detail=(
                f"{unproven[key]}; run `kernelforge cache repair` (it quarantines the entry) and transfer it again")))
        elif key in revoked:
            report.problems.append(Problem(key, entry.name, BAD_SIGNATURE, detail=revoked[key]))
        else:
            report.signed[signer] = report.signed.get(signer, 0) + 1


def unproven_arrivals(store: Any, entries: Mapping[str, Entry]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Arrivals whose recorded signer vouches for nothing: ({key: why}, [(manifest file, why)] for
    manifests in the cache's v1/signatures/ whose signature fails). What `cache verify` reports and
    `cache repair` quarantines: someone who could write the cache edited an imported entry."""
    documents = read_manifests(Layout(Path(store.root)).schema_root / SIGNATURES_DIR)
    manifests, bad = [], []
    for name, document in documents:
        try:
            manifests.append(verify_manifest(document, None, f"{SIGNATURES_DIR}/{name}"))
        except SigningError as exc:
            bad.append((f"{SIGNATURES_DIR}/{name}", str(exc)))
    unproven = {}
    for key, entry in entries.items():
        signer = (origin_of(entry.extra) or {}).get("signer")
        if signer and not any(m.signer == signer and m.covers(key, entry.files) for m in manifests):
            unproven[key] = (f"its origin says key {signer} signed it, but no valid manifest of that key "
                             "lists these bytes")
    return unproven, bad


def revoked_arrivals(entries: Mapping[str, Entry], trusted: TrustedKeys | None) -> dict[str, str]:
    """Arrivals signed by a key the trusted keys no longer hold ({key: why}); none when no trusted
    keys are configured (`trusted` None or empty: nothing to compare with)."""
    if trusted is None or not trusted.keys:
        return {}
    out = {}
    for key, entry in entries.items():
        signer = (origin_of(entry.extra) or {}).get("signer")
        if signer and signer not in trusted.keys:
            out[key] = f"signed by key {signer}, which is no longer trusted (trusted keys: {trusted.source})"
    return out


def entry_file_problems(store: CacheStore, entry: Entry, directory: Path) -> list[tuple[str, str, str]]:
    """What is wrong with one entry on disk against `entry`: (problem, file, detail) each. A
    tuning table whose files are intact must also follow the table schema."""
    out = file_problems(entry, directory)
    if out and out[0][0] == MISSING_DIR:
        return out
    meta, why = store.read_meta_checked(directory)
    if meta is None or meta.to_json() != entry.to_json():
        out.append((BAD_META, META_NAME, f"missing or unusable: {why}" if meta is None
                    else "records other metadata than the index"))
    if not out and entry.kind == "tuning":
        problem = table_problem(directory / entry.main_file)
        if problem:
            out.append((BAD_TABLE, entry.main_file, problem))
    return out


def table_problem(path: Path) -> str | None:
    """Why the tuning-table file `path` is not one the runtime would use (None: it is)."""
    try:
        validate_table(json.loads(read_regular(path, max_artifact_bytes(), limit_env=ARTIFACT_LIMIT_ENV)))
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    except ValueError as exc:  # not JSON, or TableSchemaError naming the key path
        return str(exc)
    return None


def special_files(store: CacheStore) -> list[tuple[Path, str]]:
    """(path, what it is) of every FIFO, socket and device below the root, quarantine/ excepted:
    found by lstat only, never opened (`cache repair` moves them to quarantine/)."""
    out: list[tuple[Path, str]] = []
    todo = [store.root]
    while todo:
        directory = todo.pop()
        try:
            with os.scandir(directory) as it:
                found = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for item in found:
            path = Path(item.path)
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            kind = special_kind(st.st_mode)
            if kind is not None:
                out.append((path, kind))
            elif stat.S_ISDIR(st.st_mode) and path != store.layout.quarantine:
                todo.append(path)
    return sorted(out)


def view_problems(store: CacheStore, raw: dict[str, dict[str, Any]]) -> list[Problem]:
    """How the dispatch views on disk differ from the ones the index `raw` implies."""
    views = store.layout.schema_root / VIEWS_DIR
    generation = index_generation(store.layout.index)
    try:
        size = store.layout.index.stat().st_size
    except OSError:
        return [] if not raw else [Problem("", "", STALE_VIEWS, detail="no index file")]
    files, expected = dispatch_views(raw, generation or "", size)
    try:
        manifest = json.loads(read_regular(views / MANIFEST))
    except (OSError, ValueError) as exc:
        return [Problem("", "", STALE_VIEWS, MANIFEST, f"unreadable: {exc}")]
    if manifest != expected:
        return [Problem("", "", STALE_VIEWS, MANIFEST, "does not match the index (generation, size or entries)")]
    out = []
    for name, payload in files.items():
        try:
            ok = read_regular(views / "groups" / name, len(payload.encode())) == payload.encode()
        except OSError:
            ok = False
        if not ok:
            out.append(Problem("", "", STALE_VIEWS, f"groups/{name}", "missing or edited"))
    return out


def trust_problems(store: CacheStore) -> list[tuple[Path, str]]:
    """Paths of the cache the runtime would refuse under the ownership policy (root, its
    ancestors, and everything below the schema root except locks/, tmp/ and quarantine/)."""
    out: list[tuple[Path, str]] = []
    root = store.root
    if not root.is_dir():
        return out
    for anc in reversed(Path(os.path.realpath(root)).parents):
        try:
            why = ownership_problem(os.stat(anc), ancestor=True)
        except OSError:
            continue
        if why:
            out.append((anc, why))
    skip = {store.layout.locks, store.layout.tmp, store.layout.quarantine}
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append((path, "is a symlink"))
            continue
        why = ownership_problem(st)
        if why:
            out.append((path, why))
        if stat.S_ISDIR(st.st_mode):
            todo.extend(p for p in sorted(path.iterdir(), reverse=True) if p not in skip)
    return out


def verify_layer(layer: Layer) -> VerifyReport:
    """verify() of one layer's cache root; a kernel wheel is also checked against its SHA256SUMS."""
    report = verify(CacheStore(layer.root))
    if layer.source == "wheel":
        report.problems.extend(Problem("", "", WHEEL_SUMS, detail=p) for p in sums_problems(layer.root.parent))
    return report


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
