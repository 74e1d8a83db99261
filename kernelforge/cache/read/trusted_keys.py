"""The verifying half of `cache.read.signing`: trusted keys and the check of a signature document,
what every process that opens a signed kernel wheel runs on its first kernel call. Key pairs,
signing and signed manifests stay in `cache.read.signing`, which re-exports these names; this
module is kept small because importing it is part of that first call.

`cryptography` is imported only when a signature is checked, not when a marker says these very
bytes verified before (`cache.read.wheel_signature`).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from kernelforge.cache.read.fsio import read_regular
from kernelforge.errors import CacheError

KEY_TYPE = "kernelforge-ed25519"
TRUSTED_KEYS_ENV = "KERNELFORGE_TRUSTED_KEYS"
ALLOW_UNSIGNED_ENV = "KERNELFORGE_ALLOW_UNSIGNED"  # fnmatch patterns of sources, separated by ","


class SigningError(CacheError):
    """A key or signature file is unusable, or a signature does not verify."""


# Plain classes with __slots__, not NamedTuples: every process that opens a kernel wheel imports
# this module on its first kernel call, and creating a NamedTuple class (generated methods,
# typing's metaclass) costs that call far more than creating a plain class.

class PublicKey:
    __slots__ = ("raw", "comment")

    def __init__(self, raw: bytes, comment: str = "") -> None:
        self.raw, self.comment = raw, comment

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and (self.raw, self.comment) == (other.raw, other.comment)

    def __hash__(self) -> int:
        return hash((self.raw, self.comment))

    def __repr__(self) -> str:
        return f"PublicKey({self.key_id}, comment={self.comment!r})"

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def line(self) -> str:
        text = f"{KEY_TYPE} {base64.b64encode(self.raw).decode('ascii')}"
        return f"{text} {self.comment}".rstrip()


class TrustedKeys:
    __slots__ = ("keys", "source")

    def __init__(self, keys: dict[str, PublicKey], source: str) -> None:
        self.keys = keys  # key id -> key
        self.source = source  # where they were read from, for messages ("none configured" if empty)


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


def verify_statement(document: bytes, trusted: TrustedKeys | None, where: str,
                     signature_checked: bool = False) -> tuple[str, dict[str, Any]]:
    """(signer key id, statement) of a signed statement; SigningError otherwise
    (`signature_checked`: see `_verified_body`)."""
    body = _verified_body(document, trusted, where, signature_checked)
    statement = body.get("statement")
    if body.get("format") != "kernelforge-signed-statement" or not isinstance(statement, dict):
        raise SigningError(f"{where}: not a kernelforge signed statement")
    return str(body["signer"]), statement
