"""Transfers publish in batches: one index write per `BATCH_INDEX_EVERY` entries, not one per entry
(each write rewrites the whole index and its dispatch views), and a process killed inside a batch
loses nothing: the entries it moved into place are intact, `cache verify` names them, and
`cache repair` indexes them."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kernelforge.cache.store as store_mod
from kernelforge.cache import CacheStore, verify
from kernelforge.cache.transfer.bundle import export_bundle, import_bundle
from kernelforge.cache.transfer.merge import merge
from kernelforge.cache.transfer.remote import pull, push
from tests.cache import _cache_helpers as h

REPO = Path(__file__).resolve().parents[2]
N_KERNELS = 40
EVERY = 16
RKEY = h.key_of("runtime")


def _kernel_key(i: int) -> str:
    return h.key_of(f"kernel-{i}")


@pytest.fixture
def source(tmp_path: Path) -> CacheStore:
    """A runtime library and N_KERNELS kernels linking it, each with its own random payload."""
    s = CacheStore(tmp_path / "src")
    s.get_or_build(RKEY, h.fake_build(os.urandom(256), kind="runtime", op="runtime", name="runtime-x"))
    for i in range(N_KERNELS):
        s.get_or_build(_kernel_key(i), h.fake_build(os.urandom(512), name=f"quant_{i}", extra={"runtime_key": RKEY}))
    return s


def _digests(store: CacheStore) -> dict[str, str]:
    return {k: e.sha256 for k, e in store.index(fresh=True).items()}


def _counting_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = store_mod.write_index

    def counted(path, entries, **kw):
        calls.append(len(entries))
        return real(path, entries, **kw)

    monkeypatch.setattr(store_mod, "write_index", counted)
    monkeypatch.setattr(store_mod, "BATCH_INDEX_EVERY", EVERY)
    return calls


def _import(src: CacheStore, dest: CacheStore, tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(src, bundle).ok
    assert import_bundle(dest, bundle).ok


def _pull(src: CacheStore, dest: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    assert push(src, url).ok
    assert pull(dest, url).ok


def _merge(src: CacheStore, dest: CacheStore, tmp_path: Path) -> None:
    assert merge([src], dest).ok


@pytest.mark.parametrize("transfer", [_import, _pull, _merge], ids=["import", "pull", "merge"])
def test_transfer_writes_the_index_once_per_batch(source, tmp_path, monkeypatch, transfer) -> None:
    dest = CacheStore(tmp_path / "dest")
    calls = _counting_writes(monkeypatch)
    transfer(source, dest, tmp_path)
    entries = N_KERNELS + 1
    assert _digests(dest) == _digests(source)
    assert verify(dest).ok
    # the index grows by EVERY entries per write (plus merge's final view refresh, which does not write it)
    assert len(calls) == math.ceil(entries / EVERY), calls
    assert calls == sorted(calls) and calls[-1] == entries
    calls.clear()
    transfer(source, dest, tmp_path)  # everything is there: nothing is written
    assert calls == []


KILLED_IMPORT = """
import os, signal, sys
import kernelforge.cache.store as store_mod
import kernelforge.cache.transfer.bundle as bundle
store_mod.BATCH_INDEX_EVERY = {every}
published = [0]
real = bundle.publish_staged
def publish_then_maybe_die(store, entry, staging):
    out = real(store, entry, staging)
    published[0] += 1
    if published[0] == {kill_after}:
        os.kill(os.getpid(), signal.SIGKILL)  # a real kill, between two index writes
    return out
bundle.publish_staged = publish_then_maybe_die
bundle.import_bundle(store_mod.CacheStore(sys.argv[1]), sys.argv[2])
"""


def test_import_killed_inside_a_batch_loses_nothing(source, tmp_path) -> None:
    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(source, bundle).ok
    dest_root = tmp_path / "dest"
    kill_after = EVERY + 5  # one index write done, 5 entries moved into place but not yet indexed
    proc = subprocess.run([sys.executable, "-c", KILLED_IMPORT.format(every=EVERY, kill_after=kill_after),
                           str(dest_root), str(bundle)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    dest = CacheStore(dest_root)
    indexed = _digests(dest)
    assert len(indexed) == EVERY
    unindexed = dest.unindexed()
    assert len(unindexed) == kill_after - EVERY and all(e is not None for _, e in unindexed)

    cli = [sys.executable, "-m", "kernelforge", "cache"]
    check = subprocess.run([*cli, "verify", "--cache", str(dest_root), "--format", "json"], cwd=REPO,
                           capture_output=True, text=True)
    assert check.returncode == 1, check.stdout + check.stderr  # the damage is detected...
    fix = subprocess.run([*cli, "repair", "--cache", str(dest_root)], cwd=REPO, capture_output=True, text=True)
    assert fix.returncode == 0, fix.stdout + fix.stderr  # ...and the documented command repairs it
    assert verify(dest).ok
    repaired = _digests(dest)
    want = _digests(source)
    assert len(repaired) == kill_after and all(repaired[k] == want[k] for k in repaired)  # nothing lost

    report = import_bundle(dest, bundle)  # and the import completes
    assert report.ok and len(report.present) == kill_after
    assert _digests(dest) == want and verify(dest).ok


def test_a_gzip_bundle_is_decompressed_once(source, tmp_path, monkeypatch) -> None:
    """Members are read out of order (meta.json is checked after the files it describes): from the
    compressed stream each backward seek would decompress it again from the start."""
    import gzip

    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(source, bundle).ok
    opened: list[object] = []
    real_open = gzip.open

    def counting_open(*a, **kw):
        opened.append(a[0])
        return real_open(*a, **kw)

    rewinds = [0]
    real_rewind = gzip._GzipReader._rewind  # type: ignore[attr-defined]

    def counting_rewind(self):
        rewinds[0] += 1
        return real_rewind(self)

    monkeypatch.setattr(gzip, "open", counting_open)
    monkeypatch.setattr(gzip._GzipReader, "_rewind", counting_rewind)  # type: ignore[attr-defined]
    dest = CacheStore(tmp_path / "dest")
    assert import_bundle(dest, bundle).ok
    assert rewinds[0] == 0 and len(opened) == 1
    assert _digests(dest) == _digests(source)
