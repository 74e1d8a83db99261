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
import binascii
import hashlib
import json
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

from kernelforge.cache.read.fsio import read_regular
from kernelforge.errors import CacheError

KEY_TYPE = "kernelforge-ed25519"
MANIFEST_FORMAT = "kernelforge-signed-manifest"
SIGNATURES_DIR = "signatures"  # under v1/ of a cache root, a bundle and a remote store
TRUSTED_KEYS_ENV = "KERNELFORGE_TRUSTED_KEYS"
ALLOW_UNSIGNED_ENV = "KERNELFORGE_ALLOW_UNSIGNED"  # fnmatch patterns of sources, separated by ","
_MAX_MANIFEST_BYTES = 64 * 2**20  # a manifest lists digests: far below this for any real cache


class SigningError(CacheError):
    """A key or signature file is unusable, or a signature does not verify."""


class PublicKey(NamedTuple):
    raw: bytes
    comment: str = ""

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def line(self) -> str:
        text = f"{KEY_TYPE} {base64.b64encode(self.raw).decode('ascii')}"
        return f"{text} {self.comment}".rstrip()


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


class TrustedKeys(NamedTuple):
    keys: dict[str, PublicKey]  # key id -> key
    source: str  # where they were read from, for messages ("none configured" if empty)


def manifest_name(document: bytes) -> str:
    return hashlib.sha256(document).hexdigest() + ".json"


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise SigningError(f"{what}: not base64") from None


def parse_public_keys(text: str, where: str) -> list[PublicKey]:
    """The keys of a trusted-keys or .pub file; SigningError naming `where` and the line otherwise."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition(" ")
        data, _, comment = rest.strip().partition(" ")
        if kind != KEY_TYPE:
            raise SigningError(f"{where}:{number}: expected '{KEY_TYPE} <base64 public key> [comment]'")
        raw = _b64(data, f"{where}:{number}")
        if len(raw) != 32:
            raise SigningError(f"{where}:{number}: an ed25519 public key has 32 bytes, this one {len(raw)}")
        keys.append(PublicKey(raw, comment.strip()))
    return keys


def _read_small(path: Path, what: str, limit: int = 1 << 20) -> bytes:
    """A regular file's bytes (`fsio.read_regular`: a FIFO, directory or device is refused before
    it is read, never waited on); SigningError naming `what` and the path otherwise."""
    try:
        return read_regular(path, limit, follow=True)
    except OSError as exc:
        raise SigningError(f"{what} {path}: {exc.strerror or exc}") from None


def unsigned_allowed(source: str, flag: bool = False) -> bool:
    """Whether unsigned entries from `source` (a path, URL or distribution name) are accepted:
    `--allow-unsigned` for this command, or a pattern of $KERNELFORGE_ALLOW_UNSIGNED."""
    if flag:
        return True
    patterns = [p.strip() for p in os.environ.get(ALLOW_UNSIGNED_ENV, "").split(",") if p.strip()]
    return any(fnmatchcase(source, p) for p in patterns)


def default_trusted_keys_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kernelforge" / "trusted-keys"


def trusted_keys(cli_value: str | os.PathLike[str] | None = None) -> TrustedKeys:
    """The trusted public keys: `--trusted-keys`, else $KERNELFORGE_TRUSTED_KEYS, else the default
    file if it exists (none otherwise). A named file that is missing or malformed is an error."""
    if cli_value is not None:
        paths, source = [Path(cli_value)], f"--trusted-keys {cli_value}"
    elif os.environ.get(TRUSTED_KEYS_ENV):
        paths = [Path(p) for p in os.environ[TRUSTED_KEYS_ENV].split(os.pathsep) if p]
        source = f"${TRUSTED_KEYS_ENV}"
    else:
        default = default_trusted_keys_path()
        if not default.is_file():
            return TrustedKeys({}, "none configured")
        paths, source = [default], str(default)
    keys: dict[str, PublicKey] = {}
    for path in paths:
        text = _read_small(path, "trusted keys file").decode("utf-8", errors="replace")
        for key in parse_public_keys(text, str(path)):
            keys[key.key_id] = key
    return TrustedKeys(keys, source)


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


def _verified_body(document: bytes, trusted: TrustedKeys | None, where: str,
                   signature_checked: bool = False) -> dict[str, Any]:
    """The body of a signature document whose signature verifies with its stated key, and (when
    `trusted` is given) whose key is trusted; SigningError (one line) otherwise.
    `signature_checked`: these very bytes verified before (the check is a function of the
    document alone, which names its key), so only the key's trust is checked again."""
    try:
        doc = json.loads(document)
        body_text = doc["body"]
        body = json.loads(body_text)
        signature = _b64(doc["signature"], where)
        raw = _b64(body["public_key"], where)
        signer = body["signer"]
    except (ValueError, KeyError, TypeError):
        raise SigningError(f"{where}: not a kernelforge signature document") from None
    if not isinstance(body, dict) or PublicKey(raw).key_id != signer:
        raise SigningError(f"{where}: its key id does not match its public key")
    # The whole public key must be the trusted one: an id is 64 bits of its hash.
    if trusted is not None and (signer not in trusted.keys or trusted.keys[signer].raw != raw):
        raise SigningError(f"{where}: signed by key {signer}, which is not trusted (trusted keys: {trusted.source})")
    if signature_checked:
        return body
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, body_text.encode("utf-8"))
    except (InvalidSignature, ValueError):
        raise SigningError(f"{where}: the signature of key {signer} does not verify") from None
    return body


def verify_manifest(document: bytes, trusted: TrustedKeys | None, where: str) -> SignedManifest:
    """A manifest document checked (see `_verified_body`); SigningError otherwise."""
    body = _verified_body(document, trusted, where)
    entries = body.get("entries")
    if body.get("format") != MANIFEST_FORMAT or not isinstance(entries, dict):
        raise SigningError(f"{where}: not a kernelforge signed manifest")
    return SignedManifest(str(body["signer"]), entries, document)


def verify_statement(document: bytes, trusted: TrustedKeys | None, where: str,
                     signature_checked: bool = False) -> tuple[str, dict[str, Any]]:
    """(signer key id, statement) of a signed statement; SigningError otherwise
    (`signature_checked`: see `_verified_body`)."""
    body = _verified_body(document, trusted, where, signature_checked)
    statement = body.get("statement")
    if body.get("format") != "kernelforge-signed-statement" or not isinstance(statement, dict):
        raise SigningError(f"{where}: not a kernelforge signed statement")
    return str(body["signer"]), statement


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
