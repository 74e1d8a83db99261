"""Remote stores against a real S3 API: `kernelforge cache push/pull s3://...` as a user runs them
(subprocesses, s3fs, the endpoint from AWS_ENDPOINT_URL_S3) on a local moto server, on fake entries.

The round trip and the forged blob test the transport and the re-hash of every file, on an unsigned
cache: their pulls opt in to unsigned entries from that one bucket ($KERNELFORGE_ALLOW_UNSIGNED,
ignored by a kernelforge without signing). The consistently forged entry pulls with no trust setting
at all: only a signature can tell its bytes from the pushed ones."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from kernelforge.cache.transfer.remote import INDEX_PATH
from tests._moto import S3Remote
from tests.cache import _cache_helpers as h

RKEY, KEYS = h.RKEY, h.KEYS
PLANTED = b"\x7fELF planted by whoever can write to the bucket " * 8


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    """A runtime library and two kernels that link it."""
    return h.runtime_and_two_kernels(tmp_path / "src")


def kf(remote: S3Remote, *args: str, unsigned_ok: bool = False) -> subprocess.CompletedProcess[str]:
    """`kernelforge ...` in a subprocess with the user's S3 environment (accepting unsigned entries
    from this bucket if `unsigned_ok`)."""
    env = {**remote.env, "KERNELFORGE_ALLOW_UNSIGNED": remote.url} if unsigned_ok else remote.env
    return subprocess.run([sys.executable, "-m", "kernelforge", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def out(res: subprocess.CompletedProcess[str]) -> str:
    return f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"


def file_records(store: CacheStore) -> dict[str, dict]:
    return {k: e.files for k, e in store.index(fresh=True).items()}


def blob_rel(sha: str) -> str:
    return f"v1/blobs/{sha[:2]}/{sha}"


def pushed(store: CacheStore, remote: S3Remote) -> None:
    res = kf(remote, "cache", "push", remote.url, "--cache", str(store.root))
    assert res.returncode == 0, out(res)


def test_push_pull_round_trip(store: CacheStore, s3_remote: S3Remote, tmp_path: Path) -> None:
    res = kf(s3_remote, "cache", "push", s3_remote.url, "--cache", str(store.root))
    assert res.returncode == 0, out(res)
    assert "3 entries transferred (4 file(s)" in res.stdout and "0 refused, of 3 selected" in res.stdout, out(res)
    index = json.loads(s3_remote.get(INDEX_PATH))
    assert set(index["entries"]) == set(file_records(store))  # really in the bucket, under the prefix

    dest = tmp_path / "dest"  # does not exist yet: pull creates it
    res = kf(s3_remote, "cache", "pull", s3_remote.url, "--cache", str(dest), unsigned_ok=True)
    assert res.returncode == 0, out(res)
    assert "3 entries transferred (6 file(s)" in res.stdout, out(res)  # 2 files each, shared blob included
    assert file_records(CacheStore(dest)) == file_records(store)  # same keys, same sha256s and sizes
    res = kf(s3_remote, "cache", "verify", "--cache", str(dest))
    assert res.returncode == 0 and "OK: 3 entries verified" in res.stdout, out(res)

    res = kf(s3_remote, "cache", "push", s3_remote.url, "--cache", str(store.root))
    assert res.returncode == 0, out(res)
    assert "0 entries transferred (0 file(s), 0 bytes), 3 already there" in res.stdout, out(res)


def test_forged_blob_is_refused(store: CacheStore, s3_remote: S3Remote, tmp_path: Path) -> None:
    pushed(store, s3_remote)
    a = store.get(KEYS["a"])
    s3_remote.put(blob_rel(a.sha256), PLANTED)  # quant_a's module.so, overwritten in the bucket

    dest = CacheStore(tmp_path / "dest")
    res = kf(s3_remote, "cache", "pull", s3_remote.url, "--cache", str(dest.root), unsigned_ok=True)
    assert res.returncode == 1, out(res)
    refused = [line for line in res.stdout.splitlines() if line.startswith("REFUSED:")]
    assert len(refused) == 1, out(res)
    assert "quant_a" in refused[0] and "module.so" in refused[0] and s3_remote.url in refused[0], out(res)
    assert "sha256" in refused[0] or "bytes" in refused[0], out(res)
    assert "2 entries transferred" in res.stdout and "1 refused" in res.stdout, out(res)
    assert set(dest.index(fresh=True)) == {RKEY, KEYS["b"]}
    assert dest.get(KEYS["a"]) is None and not dest.layout.entry_dir(KEYS["a"], "kernel").exists()
    assert list(dest.layout.tmp.iterdir()) == []  # nor its staging dir
    assert not any(PLANTED in p.read_bytes() for p in dest.root.rglob("*") if p.is_file())
    res = kf(s3_remote, "cache", "verify", "--cache", str(dest.root))
    assert res.returncode == 0 and "OK: 2 entries verified" in res.stdout, out(res)


def test_consistently_forged_entry_is_refused(store: CacheStore, s3_remote: S3Remote, tmp_path: Path) -> None:
    """The store signs its entries with the release key before pushing; an attacker with write
    access to the bucket forges every record of one entry. Pull trusts the release key only."""
    key = tmp_path / "release"
    assert kf(s3_remote, "key", "generate", str(key)).returncode == 0
    signed = kf(s3_remote, "cache", "sign", "--key", str(key), "--cache", str(store.root))
    assert signed.returncode == 0, out(signed)
    pushed(store, s3_remote)
    a = store.get(KEYS["a"])
    planted = {"sha256": hashlib.sha256(PLANTED).hexdigest(), "size": len(PLANTED)}
    # Every record agrees with the planted bytes: the blob (at its own name, and over the old one),
    # the entry file and the index.
    s3_remote.put(blob_rel(planted["sha256"]), PLANTED)
    s3_remote.put(blob_rel(a.sha256), PLANTED)
    forged = {**a.to_json(), "files": {**a.files, a.main_file: planted}}
    s3_remote.put(f"v1/entries/{a.key}.json", json.dumps(forged, indent=1, sort_keys=True).encode())
    index = json.loads(s3_remote.get(INDEX_PATH))
    index["entries"][a.key] = forged
    s3_remote.put(INDEX_PATH, json.dumps(index, indent=1, sort_keys=True).encode())
    if json.loads(s3_remote.get(INDEX_PATH))["entries"][a.key]["files"]["module.so"] != planted:
        pytest.fail("the forge did not stick")  # a broken test, not the expected failure (raises=)

    dest = CacheStore(tmp_path / "dest")
    res = kf(s3_remote, "cache", "pull", s3_remote.url, "--cache", str(dest.root), "--trusted-keys", f"{key}.pub")
    assert res.returncode == 1, out(res)
    refused = [line for line in res.stdout.splitlines() if line.startswith("REFUSED:")]
    assert len(refused) == 1 and "quant_a" in refused[0] and "differ from what key" in refused[0], out(res)
    assert "2 entries transferred" in res.stdout and "Traceback" not in out(res)
    assert not any(PLANTED in p.read_bytes() for p in dest.root.rglob("*") if p.is_file())
    assert sorted(e.extra["origin"]["signer"] is not None for e in dest.index(fresh=True).values()) == [True, True]
