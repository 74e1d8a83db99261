"""Which incoming entries a cache accepts (merge, import, pull), and the origin it records for each.

An entry arriving from a shard, a bundle or a remote store is accepted only if a manifest signed
by a trusted key (`kernelforge.cache.read.signing`) lists its key with exactly its file digests, or if
the user opted in to unsigned entries from that source (`--allow-unsigned`, or the source
matching a pattern of $KERNELFORGE_ALLOW_UNSIGNED). A manifest of any signer that lists the key
with other digests refuses it even then. The receiving cache records `extra.origin`
(`{"via", "from", "signer"}`) itself, overwriting whatever the source claimed, and keeps the
manifests that vouched for accepted entries in its own `v1/signatures/`, so that `cache verify`
can check them again later (`cache.maintenance.verification.unproven_arrivals` and
`revoked_arrivals`). The trust model follows Nix substituters and TUF: bytes are served
because a key the user trusts signed them, not because records agree
(https://theupdateframework.io/overview/). `covering_manifests` is what travels with entries
that leave (a bundle, a remote, a kernel wheel); `sign_cache` signs a cache's own entries.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.layout import Layout
from kernelforge.cache.read.origin import ORIGIN
from kernelforge.cache.read.signing import (
    SIGNATURES_DIR,
    SignedManifest,
    SigningError,
    TrustedKeys,
    manifest_entries,
    read_manifests,
    sign_manifest,
    trusted_keys,
    unsigned_allowed,
    verify_manifest,
    write_manifest,
)
from kernelforge.cache.transfer.common import load_local_files, select_entries


class Authority(NamedTuple):
    """The trust settings of one command: its trusted keys and whether it opted in to unsigned sources."""

    trusted: TrustedKeys
    allow_unsigned: bool = False

    @classmethod
    def configured(cls, trusted_keys_file: str | os.PathLike[str] | None = None,
                   allow_unsigned: bool = False) -> "Authority":
        return cls(trusted_keys(trusted_keys_file), allow_unsigned)

    def for_source(self, source: str, via: str) -> "SourceCheck":
        return SourceCheck(self.trusted, unsigned_allowed(source, self.allow_unsigned), source, via)


class SourceCheck:
    """The signature check of one source's entries (see the module docstring)."""

    def __init__(self, trusted: TrustedKeys, allow_unsigned: bool, source: str, via: str) -> None:
        self.trusted = trusted
        self.allow_unsigned = allow_unsigned
        self.source = source
        self.via = via
        self.manifests: list[SignedManifest] = []  # valid signatures, trusted or not
        self.notes: list[str] = []
        self._used: dict[str, SignedManifest] = {}
        self._signer: dict[str, str | None] = {}

    def add_manifests(self, documents: Iterable[tuple[str, bytes]]) -> None:
        """Read the source's manifests; a bad one is noted and vouches for nothing."""
        for name, document in documents:
            try:
                self.manifests.append(verify_manifest(document, None, f"{self.source}: manifest {name}"))
            except SigningError as exc:
                self.notes.append(str(exc))

    def refusal(self, entry: Entry) -> str | None:
        """Why `entry` is not accepted from this source (None: accepted; its signer is remembered)."""
        listing = [m for m in self.manifests if entry.key in m.entries]
        good = [m for m in listing if m.covers(entry.key, entry.files)]
        bad = [m for m in listing if m not in good]
        if bad:
            return f"its files differ from what key {bad[0].signer} signed for this key"
        trusted = [m for m in good if m.signer in self.trusted.keys]
        if trusted:
            self._signer[entry.key] = trusted[0].signer
            self._used[trusted[0].name] = trusted[0]
            return None
        if self.allow_unsigned:
            self._signer[entry.key] = None
            return None
        if good:
            signers = ", ".join(sorted({m.signer for m in good}))
            return (f"signed only by untrusted key(s) {signers} (trusted keys: {self.trusted.source}); "
                    "add the key to the trusted keys, or pass --allow-unsigned for this source")
        return (f"not signed by a trusted key (trusted keys: {self.trusted.source}); "
                "pass --allow-unsigned to accept unsigned entries from this source")

    def stamped(self, entry: Entry) -> Entry:
        """`entry` with the origin this cache records for it (after `refusal` accepted it)."""
        origin = {"via": self.via, "from": self.source, "signer": self._signer.get(entry.key)}
        return dataclasses.replace(entry, extra={**entry.extra, ORIGIN: origin})

    def keep_manifests(self, dest_root: Path) -> None:
        """Store the manifests that vouched for accepted entries in the destination cache."""
        for manifest in self._used.values():
            write_manifest(Layout(Path(dest_root)).schema_root / SIGNATURES_DIR, manifest.document)


def covering_manifests(store: Any, keys: Iterable[str]) -> list[tuple[str, bytes]]:
    """(name, bytes) of a cache's signed manifests (valid signature, any signer) listing any of `keys`:
    what travels with those entries in a bundle or to a remote store."""
    wanted = set(keys)
    out = []
    for name, document in read_manifests(Layout(Path(store.root)).schema_root / SIGNATURES_DIR):
        try:
            manifest = verify_manifest(document, None, name)
        except SigningError:
            continue
        if wanted & manifest.entries.keys():
            out.append((manifest.name, document))
    return out


def sign_cache(store: Any, key: Any, only: Iterable[str] | None = None) -> tuple[Path | None, int, list[str]]:
    """Sign the (selected) entries of a cache whose files re-hash to their records with `key` (a
    `SigningKey`): (the manifest written into v1/signatures/, entries signed, refusals)."""
    intact, refused = [], []
    for entry in select_entries(store.index(fresh=True), only=only):
        problem = load_local_files(store, entry)
        if isinstance(problem, str):
            refused.append(f"{entry.name} [{entry.key[:12]}]: not signed: {problem}")
        else:
            intact.append(entry)
    if not intact:
        return None, 0, refused
    document = sign_manifest(key, manifest_entries(intact))
    return write_manifest(Layout(Path(store.root)).schema_root / SIGNATURES_DIR, document), len(intact), refused
