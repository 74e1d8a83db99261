"""A kernel wheel's signature: a statement the release key signs at `kernelforge package --sign-key`,
checked whenever a process opens the wheel as a cache layer.

The statement names the distribution and binds, by sha256, the wheel's SHA256SUMS (every file of
the package), `cache/v1/dispatch/manifest.json` and the index's generation and size. The runtime
reads a signed wheel through the manifest alone: it names each dispatch group file, runtime
library and tuning table by content hash, and group rows carry each module's sha256, checked at
load. It never falls back to the wheel's index (which the statement binds only by generation and
size): a group file that does not match the manifest leaves that group unserved by the wheel,
with a warning naming the repair (`runtime.layer_reader`). Opening a wheel thus costs one
signature check and one small file hash, not a hash of every module; reports and `cache verify`
also check SHA256SUMS and the index against the statement, and `cache verify` re-hashes every
file against SHA256SUMS. PyPI's wheel attestations bind a wheel to its publisher the same way
(https://docs.pypi.org/attestations/).

A wheel without SIGNATURE.json, or signed by a key that is not trusted, is refused unless its
distribution name matches $KERNELFORGE_ALLOW_UNSIGNED.

Whether a SIGNATURE.json's signature verifies is a function of its bytes alone (it names its
public key), so a process that verified one leaves a marker named by the document's sha256 in
the writable cache layer (`v1/verified-signatures/`); a later process that finds the marker,
a regular file the cache's trust policy accepts (checked with lstat alone, never opened), skips
the Ed25519 check and cryptography's import, and
still checks that the key is trusted and that the statement covers the files present. Whoever
could plant a marker could already write the cache, which is outside the threat model
(docs/cache-and-security.md).
"""
import hashlib
import os
from pathlib import Path
from typing import Any

from kernelforge.cache.read.fsio import make_dirs, open_regular
from kernelforge.cache.read.trust import TrustedRoot

# `cache.read.trusted_keys` is imported when a wheel is opened, not with this module: the runtime
# imports this with the layers on every process's first call, with or without a kernel wheel.

SIGNATURE_FILE = "SIGNATURE.json"  # in the wheel's package, next to SHA256SUMS
VERIFIED_DIR = "verified-signatures"  # under v1/ of the writable cache root: one empty file per document
_MANIFEST = "cache/v1/dispatch/manifest.json"
_INDEX = "cache/v1/index.json"
_GENERATION_PREFIX = b'{"generation": "'


def _generation(head: bytes) -> str:
    if head.startswith(_GENERATION_PREFIX):
        return head[len(_GENERATION_PREFIX):len(_GENERATION_PREFIX) + 32].decode("ascii", "replace")
    return ""


def wheel_statement(distribution: str, sums: bytes, manifest: bytes, index: bytes) -> dict[str, Any]:
    """What `package` signs for a wheel (the files' bytes as written into it)."""
    return {"kind": "kernelforge-kernel-wheel", "distribution": distribution,
            "sums_sha256": hashlib.sha256(sums).hexdigest(), "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
            "index_generation": _generation(index[:64]), "index_size": len(index)}


def _read(path: Path, limit: int) -> bytes:
    from kernelforge.cache.read.trusted_keys import _read_small

    return _read_small(path, "kernel wheel file", limit)


def _verified_before(memo: TrustedRoot | None, digest: str) -> bool:
    """Whether a trusted marker of the document `digest` is in the root of `memo` (see the module
    docstring), checked under the cache's trust policy without opening a descriptor."""
    return memo is not None and memo.holds_regular_file(("v1", VERIFIED_DIR, digest))


def _remember(memo: TrustedRoot | None, digest: str) -> None:
    """Leave the marker of a verified document; best effort (a read-only cache stays unwritten)."""
    if memo is None:
        return
    try:
        directory = memo.root / "v1" / VERIFIED_DIR
        make_dirs(directory)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # O_EXCL: never open what is already there (a FIFO's open for writing would wait for a reader)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            os.close(os.open(digest, flags, 0o644, dir_fd=dfd))
        finally:
            os.close(dfd)
    except OSError:
        pass


class WheelCheck:
    """What opening a kernel wheel found: why it is refused (None: served), the key that signed it
    (None: unsigned) and, for a signed wheel, the dispatch manifest the signature covers (its
    bytes as checked; the runtime reads its dispatch groups through this copy alone)."""

    __slots__ = ("refused", "signer", "manifest")

    def __init__(self, refused: str | None, signer: str | None = None, manifest: bytes | None = None) -> None:
        self.refused, self.signer, self.manifest = refused, signer, manifest


def check_wheel(package_dir: Path, distribution: str, memo: TrustedRoot | None = None, *,
                trusted: Any = None, full: bool = True) -> WheelCheck:
    """Open a kernel wheel's signature (see the module docstring). `memo`: the writable cache
    root, where verified signatures are remembered (None: none). `trusted`: the trusted keys
    (`trusted_keys.trusted_keys()`, read here if None). `full`: also check SHA256SUMS and the index
    against the statement (reports and `cache verify`, which read them); the runtime passes False,
    as it reads neither of a signed wheel: it serves the dispatch groups the checked manifest
    names, each file checked against its content address, each module against its sha256 in
    them (`runtime.layer_reader`)."""
    from kernelforge.cache.read.trusted_keys import SigningError, trusted_keys, unsigned_allowed, verify_statement

    sig_path = package_dir / SIGNATURE_FILE
    if not os.path.lexists(sig_path):
        if unsigned_allowed(distribution):
            return WheelCheck(None)
        return WheelCheck(f"it is unsigned (no {SIGNATURE_FILE}); install a wheel signed by a trusted key "
                          f"(`kernelforge package --sign-key`), or allow this one with "
                          f"KERNELFORGE_ALLOW_UNSIGNED={distribution}")
    try:
        document = _read(sig_path, 1 << 16)
        digest = hashlib.sha256(document).hexdigest()
        checked = _verified_before(memo, digest)
        signer, st = verify_statement(document, trusted_keys() if trusted is None else trusted,
                                      f"{SIGNATURE_FILE}", signature_checked=checked)
        if not checked:
            _remember(memo, digest)
        if st.get("kind") != "kernelforge-kernel-wheel" or st.get("distribution") != distribution:
            raise SigningError(f"{SIGNATURE_FILE} signs distribution {st.get('distribution')!r}, not {distribution!r}")
        manifest = _read(package_dir / _MANIFEST, 64 << 20)
        if hashlib.sha256(manifest).hexdigest() != st.get("manifest_sha256"):
            raise SigningError(f"{_MANIFEST} is not the one the signature covers")
        if full:
            sums = _read(package_dir / "SHA256SUMS", 64 << 20)
            if hashlib.sha256(sums).hexdigest() != st.get("sums_sha256"):
                raise SigningError("SHA256SUMS is not the one the signature covers")
            fd, st_index = open_regular(package_dir / _INDEX, follow=True)  # never waits on a FIFO
            try:
                head, size = os.read(fd, 64), st_index.st_size
            finally:
                os.close(fd)
            if size != st.get("index_size") or _generation(head) != st.get("index_generation"):
                raise SigningError(f"{_INDEX} is not the one the signature covers")
    except (SigningError, OSError) as exc:
        return WheelCheck(f"its signature does not hold: {exc}")
    return WheelCheck(None, signer, manifest)


def signature_status(package_dir: Path, distribution: str,
                     memo_root: Path | None = None) -> tuple[str | None, str | None]:
    """(why the wheel must be refused or None, the signer's key id or None if unsigned): the full
    `check_wheel`. With `cache verify`'s re-hash of every file against SHA256SUMS this covers
    every byte of the wheel."""
    check = check_wheel(package_dir, distribution, TrustedRoot(memo_root) if memo_root is not None else None)
    return check.refused, check.signer
