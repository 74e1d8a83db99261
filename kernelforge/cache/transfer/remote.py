"""Remote stores through fsspec (file://, s3://, gs://, http(s):// read-only): push and pull.

Layout of a remote at URL (content-addressed; nothing is ever rewritten in place):

```
URL/v1/blobs/<sha[:2]>/<sha256>   every file of every entry, named by the sha256 of its bytes
URL/v1/entries/<key>.json         one entry's metadata (Entry JSON, files' sha256 and sizes)
URL/v1/remote-index.json          {"schema": 1, "format": "kernelforge-remote", "entries": {key: Entry JSON},
                                   "signatures": [manifest names]}
URL/v1/signatures/<sha256>.json   signed manifests covering pushed entries (`kernelforge.cache.read.signing`)
```
Pull publishes an entry only if one of those manifests, signed by a trusted key, vouches for its
bytes (or the remote is allowed unsigned; `kernelforge.cache.transfer.provenance`), and an entry whose
key the local cache holds with other bytes is a conflict: quarantined, never served.

Push order: an entry's blobs, then its `entries/<key>.json`, then the index, so every key the
index lists has all its blobs. Blobs are immutable (same name, same bytes), so two pushers of the
same key never mix files: each entry JSON describes blobs that exist. The index is re-read and
merged just before it is written and read back afterwards (retried if a concurrent pusher's
write dropped our keys); any key whose `entries/<key>.json` exists but that the index lacks (a
lost race, a crashed push) is merged back by the next push. Pull never trusts the remote: every
blob is re-hashed against the entry's metadata in a private staging dir before `publish`.
Object stores make each PUT atomic; on file:// each object is written to a temporary name and
renamed. Nothing is deleted from a remote (no remote garbage collection).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import (
    ARTIFACT_LIMIT_ENV,
    INDEX_LIMIT_ENV,
    FileTooLarge,
    NotRegularFile,
    max_index_bytes,
    read_regular,
    write_failure,
)
from kernelforge.cache.read.layout import SCHEMA_VERSION, check_key
from kernelforge.cache.read.signing import SIGNATURES_DIR, manifest_name
from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer.common import (
    Rejected,
    TransferError,
    TransferReport,
    bytes_problem,
    load_local_files,
    parse_entries,
    publish_staged,
    quarantine_conflict,
    read_entries_index,
    runtime_key_of,
    runtime_missing,
    same_files,
    select_entries,
    stage_file,
)
from kernelforge.cache.transfer.provenance import Authority, covering_manifests
from kernelforge.errors import CacheError

REMOTE_FORMAT = "kernelforge-remote"
INDEX_PATH = f"v{SCHEMA_VERSION}/remote-index.json"
_READ_ONLY = ("http", "https")
_EXTRA = {"s3": "remote-s3", "s3a": "remote-s3", "gs": "remote-gcs", "gcs": "remote-gcs", "http": "remote-http",
          "https": "remote-http"}
_INDEX_WRITE_TRIES = 3
TIMEOUT_ENV = "KERNELFORGE_REMOTE_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0  # per connect and per read; a remote that does not answer fails within about a minute


def network_timeout() -> float:
    """Seconds one connect or read may wait on the network: $KERNELFORGE_REMOTE_TIMEOUT, else 10."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise TransferError(f"${TIMEOUT_ENV}={raw!r}: expected seconds, more than 0 and at most 3600 (e.g. 10)")
    return value


def _bounded_options(protocol: str, timeout: float) -> dict[str, Any]:
    """Storage options that bound each network wait of the backends kernelforge ships extras for (their
    defaults wait 30 s to 5 min, retried); what the user's fsspec configuration sets is kept."""
    try:
        from fsspec.config import conf
    except ImportError:
        conf = {}
    user = conf.get(protocol, {}) if isinstance(conf.get(protocol), dict) else {}
    if protocol == "ftp":
        return {} if "timeout" in user else {"timeout": timeout}
    if protocol in ("http", "https"):
        import aiohttp

        client = dict(user.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout))
        return {"client_kwargs": client}
    if protocol in ("s3", "s3a"):
        config = dict(user.get("config_kwargs") or {})
        config.setdefault("connect_timeout", timeout)
        config.setdefault("read_timeout", timeout)
        config.setdefault("retries", {"mode": "standard", "total_max_attempts": 1})  # s3fs itself tries 5 times
        return {"config_kwargs": config}
    return {}


class Remote:
    """One remote store: fsspec filesystem + root path, and the layout above."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
        try:
            import fsspec

            self.fs, root = fsspec.core.url_to_fs(url, **_bounded_options(protocol, network_timeout()))
        except ImportError as exc:
            extra = _EXTRA.get(protocol, "remote")
            raise TransferError(f"remote {url}: {protocol}:// needs a backend that is not installed ({exc}); "
                                f"pip install 'kernelforge[{extra}]'") from None
        except (ValueError, TypeError) as exc:
            raise TransferError(f"remote {url}: not a usable fsspec URL ({exc})") from None
        except TransferError:
            raise
        except Exception as exc:  # backends that connect at once (ftp, sftp): unknown host, refused, timed out
            raise TransferError(f"remote {url}: cannot connect ({type(exc).__name__}: {exc})") from None
        if protocol in ("s3", "s3a") and isinstance(getattr(self.fs, "retries", None), int):
            # s3fs retries a timed-out request 5 times, nested for ranged reads (25 waits): 2 keeps an
            # unresponsive endpoint to about 4 timeouts (retries is a class attribute, not an option)
            self.fs.retries = min(self.fs.retries, 2)
        self.root = str(root).rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, (tuple, list)) else (self.fs.protocol,)
        self.read_only = any(p in _READ_ONLY for p in protocols)
        self.local = "file" in protocols or "local" in protocols
        self.signature_names: list[str] = []  # the signed manifests the index lists (read_index)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def blob_path(self, sha: str) -> str:
        check_key(sha)
        return self.path(f"v{SCHEMA_VERSION}/blobs/{sha[:2]}/{sha}")

    def entry_path(self, key: str) -> str:
        return self.path(f"v{SCHEMA_VERSION}/entries/{check_key(key)}.json")

    # ---- reading ----

    def read(self, path: str, what: str, limit: int | None = None, limit_env: str = INDEX_LIMIT_ENV) -> bytes | None:
        """The bytes at `path`, None if it does not exist; TransferError if the remote cannot be read.

        At most `limit` bytes (default: `fsio.max_index_bytes()`) are read, by a ranged read: an
        object larger than that is Rejected without reading the rest. On file:// a FIFO, socket
        or device is refused, never opened."""
        limit = max_index_bytes() if limit is None else limit
        try:
            if self.local:
                data = read_regular(self.fs._strip_protocol(path), limit, follow=True, limit_env=limit_env)
            else:
                data = self._ranged(path, limit)
        except FileNotFoundError:
            return None
        except (NotRegularFile, FileTooLarge) as exc:
            raise Rejected(f"remote {self.url}: {what} is {exc.strerror}") from None
        except Exception as exc:  # fsspec backends raise their own types (aiohttp, botocore, ...)
            raise TransferError(f"remote {self.url}: cannot read {what} ({type(exc).__name__}: {exc})") from None
        if len(data) > limit:
            raise Rejected(f"remote {self.url}: {what} holds more than {limit} bytes, over the limit (${limit_env} "
                           "sets it); nothing more of it was read")
        return data

    def _ranged(self, path: str, limit: int) -> bytes:
        """At most limit + 1 bytes of `path`. A ranged read of an empty object fails on S3 (416, range
        not satisfiable): where the ranged read fails, the object's size decides."""
        try:
            return self.fs.cat_file(path, start=0, end=limit + 1)
        except FileNotFoundError:
            raise
        except Exception as exc:
            try:
                size = self.fs.info(path).get("size")
            except Exception:
                raise exc from None  # unreachable, refused, ...: the read's own error says it
            if size == 0:
                return b""
            if not isinstance(size, int) or size > limit:
                raise
            return self.fs.cat_file(path)  # known to be small enough

    def read_index(self) -> dict[str, Any] | None:
        """The raw entries of the remote index, None if the remote has none (its list of signed
        manifests is kept in `signature_names`)."""
        data = self.read(self.path(INDEX_PATH), INDEX_PATH)
        if data is None:
            return None
        entries = read_entries_index(data, REMOTE_FORMAT, f"remote {self.url}", INDEX_PATH)
        names = json.loads(data).get("signatures")
        self.signature_names = sorted({n for n in names if isinstance(n, str)} if isinstance(names, list) else ())
        return entries

    def signature_path(self, name: str) -> str:
        return self.path(f"v{SCHEMA_VERSION}/{SIGNATURES_DIR}/{name}")

    def manifests(self) -> list[tuple[str, bytes]]:
        """(name, bytes) of the signed manifests the index lists; a name that is not a content
        address, a missing file or one whose bytes do not match its name is skipped."""
        out = []
        for name in self.signature_names:
            if len(name) != 69 or not name.endswith(".json"):
                continue
            data = self.read(self.signature_path(name), f"signature manifest {name}")
            if data is not None and manifest_name(data) == name:
                out.append((name, data))
        return out

    def listed_entry_keys(self) -> list[str]:
        """Keys with an entries/<key>.json (empty where the backend cannot list, e.g. HTTP)."""
        try:
            names = self.fs.ls(self.path(f"v{SCHEMA_VERSION}/entries"), detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise TransferError(f"remote {self.url}: cannot list entries ({type(exc).__name__}: {exc})") from None
        return sorted(n.rsplit("/", 1)[-1][:-5] for n in names if str(n).endswith(".json"))

    def has(self, path: str) -> bool:
        try:
            return bool(self.fs.exists(path))
        except Exception as exc:
            raise TransferError(f"remote {self.url}: cannot stat {path} ({type(exc).__name__}: {exc})") from None

    # ---- writing ----

    def require_writable(self) -> None:
        if self.read_only:
            raise TransferError(f"remote {self.url} is read-only (HTTP remotes can only be pulled from); "
                                "push to a file://, s3:// or gs:// URL and serve that directory over HTTP")

    def write(self, path: str, data: bytes) -> None:
        """Store `data` at `path` so that readers see all of it or nothing."""
        try:
            if self.local:
                parent = path.rsplit("/", 1)[0]
                self.fs.makedirs(parent, exist_ok=True)
                tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, path)
            else:
                self.fs.pipe_file(path, data)  # one PUT: atomic on object stores
        except Exception as exc:
            raise TransferError(f"remote {self.url}: cannot write {path} ({type(exc).__name__}: {exc})") from None

    def write_index(self, entries: dict[str, Any], signatures: list[str]) -> None:
        body = json.dumps({"schema": SCHEMA_VERSION, "format": REMOTE_FORMAT, "entries": entries,
                           "signatures": sorted(set(signatures))}, indent=1, sort_keys=True)
        self.write(self.path(INDEX_PATH), body.encode())


def push(store: CacheStore, url: str, *, only: Iterable[str] | None = None,
         keys: Iterable[str] | None = None, dry_run: bool = False) -> TransferReport:
    """Upload the selected local entries the remote's index lacks (see the module docstring).
    With `dry_run` the remote is only read: each local entry is re-hashed and the report counts the
    blobs the remote lacks, but nothing is uploaded and its index is not touched."""
    remote = Remote(url)
    remote.require_writable()
    report = TransferReport("push", str(store.root), remote.url, dry_run=dry_run)
    remote_raw = remote.read_index() or {}
    selected = select_entries(store.index(fresh=True), only=only, keys=keys)
    report.selected = len(selected)
    pushed: dict[str, Any] = {}
    for entry in selected:
        if entry.key in remote_raw:
            report.present.append(entry.name)
            continue
        rkey = runtime_key_of(entry)
        if rkey and rkey not in remote_raw and rkey not in pushed:
            report.refuse(entry, f"not pushed to {remote.url}: its runtime library [{rkey[:12]}] is not there")
            continue
        files = load_local_files(store, entry)
        if isinstance(files, str):
            report.refuse(entry, f"not pushed to {remote.url}: {files}")
            continue
        for rel, data in files.items():
            blob = remote.blob_path(entry.files[rel]["sha256"])
            if not remote.has(blob):
                if not dry_run:
                    remote.write(blob, data)
                report.files += 1
                report.bytes += len(data)
        if not dry_run:
            remote.write(remote.entry_path(entry.key),
                         json.dumps(entry.to_json(), indent=1, sort_keys=True).encode())
        pushed[entry.key] = entry.to_json()
        report.transferred.append(entry.name)
    if dry_run:
        return report
    signatures = []
    for name, document in covering_manifests(store, [e.key for e in selected]):
        if name not in remote.signature_names and not remote.has(remote.signature_path(name)):
            remote.write(remote.signature_path(name), document)
        signatures.append(name)
    _update_index(remote, pushed, report, signatures)
    return report


def _update_index(remote: Remote, pushed: dict[str, Any], report: TransferReport, signatures: list[str]) -> None:
    """Merge `pushed` (and entries a lost race left out) into the remote index; check it stuck."""
    current = remote.read_index() or {}
    healed: dict[str, Any] = {}
    for key in remote.listed_entry_keys():
        if key in current or key in pushed:
            continue
        data = remote.read(remote.entry_path(key), f"entries/{key}.json")
        try:
            entry = Entry.from_json(json.loads(data or b"null"))
        except (ValueError, CacheError, TypeError):
            continue  # not a usable entry file: pull would refuse it anyway
        if entry.key == key:
            healed[key] = entry.to_json()
            report.notes.append(f"re-indexed {entry.name} [{key[:12]}] (pushed earlier, missing from the index)")
    for attempt in range(_INDEX_WRITE_TRIES):
        if attempt:
            current = remote.read_index() or {}
        merged = {**pushed, **healed, **current}  # an entry already indexed stays as indexed
        names = sorted(set(remote.signature_names) | set(signatures))
        if merged == current and names == remote.signature_names:
            return
        remote.write_index(merged, names)
        after = remote.read_index() or {}
        if all(k in after for k in merged) and set(names) <= set(remote.signature_names):
            return
    report.notes.append(f"the index of {remote.url} kept losing keys to concurrent pushers; "
                        "run push again (the entries themselves are complete)")


def pull(store: CacheStore, url: str, *, only: Iterable[str] | None = None, keys: Iterable[str] | None = None,
         missing_ok: bool = False, authority: Authority | None = None,
         audit: Callable[[Sequence[Entry]], str | None] | None = None, dry_run: bool = False) -> TransferReport:
    """Download the selected remote entries the local cache lacks, verify every file and its
    signature, publish each.

    A remote without an index is an error, unless `missing_ok` (then nothing is pulled). With
    `dry_run` the index and signed manifests are read and every entry checked (signature, runtime
    library, conflict with the cache's own), but no blob is downloaded and nothing is written: the
    report counts the recorded files and bytes that would be."""
    remote = Remote(url)
    report = TransferReport("pull", remote.url, str(store.root), dry_run=dry_run)
    check = (authority or Authority.configured()).for_source(remote.url, "pull")
    raw = remote.read_index()
    if raw is None and missing_ok:
        report.notes.append(f"remote {remote.url} holds no entries yet")
        return report
    if raw is None:
        raise TransferError(f"remote {remote.url} has no {INDEX_PATH}: nothing was pushed there, or the URL is wrong")
    selected = select_entries(parse_entries(raw, f"remote {remote.url}", report), only=only, keys=keys)
    report.selected = len(selected)
    check.add_manifests(remote.manifests())
    reason = audit([e for e in selected if store.get(e.key) is None]) if audit is not None else None
    if reason is not None:
        raise Rejected(f"remote {remote.url}: {reason}; nothing was pulled")
    try:
        _pull_selected(store, remote, selected, check, report)
        if not dry_run:
            check.keep_manifests(store.root)
    except OSError as exc:  # the cache's disk is full, ...: stop, one line (CLI exit 2)
        raise TransferError(f"pull from {remote.url} stopped: {write_failure(exc, f'the cache {store.root}')}; "
                            f"{len(report.transferred)} entries were pulled before, each complete (`kernelforge "
                            f"cache verify --cache {store.root}` checks them); run the pull again") from None
    report.notes.extend(check.notes)
    return report


def _pull_selected(store: CacheStore, remote: Remote, selected: list[Entry], check: Any,
                   report: TransferReport) -> None:
    arrived: set[str] = set()
    with contextlib.nullcontext() if report.dry_run else store.publishing_batch():
        for entry in selected:
            held = store.get(entry.key)
            if held is not None and same_files(held, entry):
                report.present.append(entry.name)
                continue
            if held is not None and report.dry_run:
                quarantine_conflict(store, held, entry, "", remote.url, report)  # reported, nothing fetched
                continue
            if held is not None:
                staging = store.staging_dir()
                problem, _ = _fetch_into(remote, entry, staging)
                if problem:
                    shutil.rmtree(staging, ignore_errors=True)
                quarantine_conflict(store, held, entry, problem or staging, remote.url, report)
                continue
            why = check.refusal(entry) or runtime_missing(entry, store, arrived)
            if why:
                report.refuse(entry, f"not pulled from {remote.url}: {why}")
                continue
            if report.dry_run:  # no blob is downloaded: what its metadata records
                arrived.add(entry.key)
                report.transferred.append(entry.name)
                report.files += len(entry.files)
                report.bytes += entry.size
                continue
            staging = store.staging_dir()
            try:
                problem, nbytes = _fetch_into(remote, entry, staging)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            if problem:
                shutil.rmtree(staging, ignore_errors=True)
                report.refuse(entry, f"{problem}; nothing of it was published")
                continue
            publish_staged(store, check.stamped(entry), staging)
            arrived.add(entry.key)
            report.transferred.append(entry.name)
            report.files += len(entry.files)
            report.bytes += nbytes


def _fetch_into(remote: Remote, entry: Entry, staging: Path) -> tuple[str | None, int]:
    """Download `entry`'s files into `staging`, each checked on arrival: (why not, None if all match; bytes)."""
    nbytes = 0
    for rel, info in sorted(entry.files.items()):
        # the recorded size was checked against the cap (`common.parse_entries`); a blob larger than
        # recorded is refused after that many bytes and one more, the rest never read
        try:
            data = remote.read(remote.blob_path(str(info["sha256"])),
                               f"blob of {entry.name} [{entry.key[:12]}] {rel}", int(info["size"]), ARTIFACT_LIMIT_ENV)
        except Rejected as exc:
            return str(exc), nbytes
        if data is None:
            return f"file {rel} is missing from {remote.url}", nbytes
        mismatch = bytes_problem(data, info)
        if mismatch:
            return f"file {rel} from {remote.url} {mismatch}", nbytes
        stage_file(staging, rel, data)
        nbytes += len(data)
    return None, nbytes
