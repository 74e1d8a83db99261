"""Ed25519 keys and signed manifests: who produced the bytes a cache, bundle, remote or wheel holds.

The cache's hashes prove that files match their own records, not who wrote the records. A
signed manifest binds keys to file digests under a release key, as Nix binary caches sign store
paths with a key whose public half users list as trusted (https://nixos.org/manual/nix/stable/command-ref/conf-file.html#conf-trusted-public-keys).

* A key pair: `kernelforge key generate PATH` writes PATH (PKCS#8 PEM private key, mode 0600)
  and PATH.pub, one line `kernelforge-ed25519 <base64 of the 32-byte public key> [comment]`.
  A key's id is the first 16 hex digits of sha256 of the raw public key.
* Trusted keys: files of such lines (`#` starts a comment), from `--trusted-keys FILE`, else
  `$KERNELFORGE_TRUSTED_KEYS` (files joined by `:`), else `$XDG_CONFIG_HOME/kernelforge/trusted-keys`
  (`~/.config/...`) if it exists.
* A signed manifest is JSON `{"body": "<canonical JSON text>", "signature": "<base64>"}`; the
  body names the format, the signer's key id and public key, and `entries`: key -> {kind, name,
  files: {relative path: sha256}}. Ed25519 signatures are deterministic, so the same entries
  signed with the same key give the same bytes (wheels stay reproducible). Manifests are stored
  content-addressed: `v1/signatures/<sha256 of the document>.json`.

`cryptography` is imported only when a signature is made or checked.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

from kernelforge.cache.read.trusted_keys import (
    ALLOW_UNSIGNED_ENV,
    KEY_TYPE,
    TRUSTED_KEYS_ENV,
    PublicKey,
    SigningError,
    TrustedKeys,
    _read_small,
    _verified_body,
    default_trusted_keys_path,
    parse_public_keys,
    trusted_keys,
    unsigned_allowed,
    verify_statement,
)

__all__ = ["ALLOW_UNSIGNED_ENV", "KEY_TYPE", "MANIFEST_FORMAT", "SIGNATURES_DIR", "TRUSTED_KEYS_ENV", "PublicKey",
           "SignedManifest", "SigningError", "SigningKey", "TrustedKeys", "default_trusted_keys_path",
           "generate_key", "load_signing_key", "manifest_entries", "manifest_name", "parse_public_keys",
           "read_manifests", "sign_manifest", "sign_statement", "trusted_keys", "unsigned_allowed",
           "verify_manifest", "verify_statement", "write_manifest"]

MANIFEST_FORMAT = "kernelforge-signed-manifest"
SIGNATURES_DIR = "signatures"  # under v1/ of a cache root, a bundle and a remote store
_MAX_MANIFEST_BYTES = 64 * 2**20  # a manifest lists digests: far below this for any real cache


class SignedManifest(NamedTuple):
    """A manifest whose signature verified: its signer and what it vouches for."""

    signer: str  # key id
    entries: dict[str, dict[str, Any]]  # key -> {"kind", "name", "files": {rel: sha256}}
    document: bytes  # the exact bytes, to be copied along with the entries it covers

    @property
    def name(self) -> str:
        return manifest_name(self.document)

    def covers(self, key: str, files: Mapping[str, Mapping[str, Any]]) -> bool:
        """Whether this manifest lists `key` with exactly these files and sha256s."""
        listed = self.entries.get(key)
        if not isinstance(listed, dict) or not isinstance(listed.get("files"), dict):
            return False
        return listed["files"] == {rel: str(info["sha256"]) for rel, info in files.items()}


def manifest_name(document: bytes) -> str:
    return hashlib.sha256(document).hexdigest() + ".json"


# ---- key pairs ----

def generate_key(path: Path, comment: str = "") -> PublicKey:
    """Write a new private key to `path` (0600, never overwriting) and its public line to path.pub."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    public = PublicKey(raw, comment)
    if not str(path) or not path.name or path.is_dir():
        raise SigningError(f"key path {str(path)!r}: expected a file name to write the private key to")
    if not path.parent.is_dir():
        raise SigningError(f"key path {path}: directory {path.parent} does not exist")
    pub_path = path.with_name(path.name + ".pub")
    for target in (path, pub_path):
        if target.exists() or target.is_symlink():
            raise SigningError(f"{target} exists; refusing to overwrite a key")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise SigningError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub_path.write_text(public.line() + "\n", encoding="ascii")
    return public


class SigningKey(NamedTuple):
    private: Any  # cryptography's Ed25519PrivateKey
    public: PublicKey

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def load_signing_key(path: str | os.PathLike[str]) -> SigningKey:
    """A private key written by `generate_key` (or any PKCS#8 PEM ed25519 key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_small(Path(path), "signing key")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"signing key {path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise SigningError(f"signing key {path}: not an ed25519 key")
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SigningKey(private, PublicKey(raw))


# ---- manifests ----

def manifest_entries(entries: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """What a manifest says of cache entries (`Entry` objects): key -> kind, name, file digests."""
    return {e.key: {"kind": e.kind, "name": e.name,
                    "files": {rel: str(info["sha256"]) for rel, info in sorted(e.files.items())}}
            for e in sorted(entries, key=lambda e: e.key)}


def sign_manifest(key: SigningKey, entries: Mapping[str, Mapping[str, Any]]) -> bytes:
    """A signed manifest document over `entries` (as `manifest_entries` makes them)."""
    body = json.dumps({"format": MANIFEST_FORMAT, "schema": 1, "signer": key.public.key_id,
                       "public_key": base64.b64encode(key.public.raw).decode("ascii"),
                       "entries": dict(sorted(entries.items()))}, sort_keys=True, separators=(",", ":"))
    signature = key.sign(body.encode("utf-8"))
    doc = {"body": body, "signature": base64.b64encode(signature).decode("ascii")}
    return (json.dumps(doc, sort_keys=True, indent=0) + "\n").encode("utf-8")


def sign_statement(key: SigningKey, statement: Mapping[str, Any]) -> bytes:
    """A signed statement document (e.g. what a kernel wheel holds: see kernelforge.cache.read.wheel_signature)."""
    body = json.dumps({"format": "kernelforge-signed-statement", "schema": 1, "signer": key.public.key_id,
                       "public_key": base64.b64encode(key.public.raw).decode("ascii"),
                       "statement": dict(statement)}, sort_keys=True, separators=(",", ":"))
    doc = {"body": body, "signature": base64.b64encode(key.sign(body.encode("utf-8"))).decode("ascii")}
    return (json.dumps(doc, sort_keys=True, indent=0) + "\n").encode("utf-8")


def verify_manifest(document: bytes, trusted: TrustedKeys | None, where: str) -> SignedManifest:
    """A manifest document checked (see `_verified_body`); SigningError otherwise."""
    body = _verified_body(document, trusted, where)
    entries = body.get("entries")
    if body.get("format") != MANIFEST_FORMAT or not isinstance(entries, dict):
        raise SigningError(f"{where}: not a kernelforge signed manifest")
    return SignedManifest(str(body["signer"]), entries, document)


def read_manifests(directory: Path) -> list[tuple[str, bytes]]:
    """(name, bytes) of every manifest file in a cache's `v1/signatures/` (none if absent);
    anything that is not a regular .json file there is skipped."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        if name.endswith(".json"):
            try:
                out.append((name, _read_small(directory / name, "signature manifest", _MAX_MANIFEST_BYTES)))
            except SigningError:
                continue
    return out


def write_manifest(directory: Path, document: bytes) -> Path:
    """Store a manifest content-addressed in `directory` (atomic; an existing copy is kept)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / manifest_name(document)
    if not target.exists():
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(document)
        os.replace(tmp, target)
    return target
