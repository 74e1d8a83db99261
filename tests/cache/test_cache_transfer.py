"""Remote stores (file:// and a real local HTTP server) and offline bundles, on fake entries."""
from __future__ import annotations

import io
import json
import socket
import tarfile
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelforge.cache import CacheStore, verify
from kernelforge.cache.transfer.bundle import BUNDLE_INDEX, export_bundle, import_bundle
from kernelforge.cache.transfer.common import Rejected, TransferError
from kernelforge.cache.transfer.remote import INDEX_PATH, Remote, pull, push
from kernelforge.cli import cache as cache_cli
from tests.cache import _cache_helpers as h

root_app = typer.Typer()
root_app.add_typer(cache_cli.app, name="cache")
RKEY, KEYS = h.RKEY, h.KEYS


def run(*args: str):
    return CliRunner().invoke(root_app, ["cache", *args], env={"COLUMNS": "200"})


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    """A runtime library and two kernels that link it."""
    return h.runtime_and_two_kernels(tmp_path / "src")


def fresh(tmp_path: Path, name: str) -> CacheStore:
    return CacheStore(tmp_path / name)


def same_entries(a: CacheStore, b: CacheStore) -> bool:
    """Equal entries, but for what the receiving cache records itself: arrival time and origin."""
    def own(e):
        return {**e.to_json(), "created": "", "extra": {k: v for k, v in e.extra.items() if k != "origin"}}

    ja = {k: own(e) for k, e in a.index(fresh=True).items()}
    jb = {k: own(e) for k, e in b.index(fresh=True).items()}
    return ja == jb


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# ---- remote stores ----

def test_push_then_pull_file_url(store: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    report = push(store, url)
    assert report.ok and len(report.transferred) == 3 and report.present == []
    assert report.files == 4  # 3 module.so + one shared sub/kernel.ptx blob (content-addressed)
    assert (tmp_path / "remote" / INDEX_PATH).is_file()

    dest = fresh(tmp_path, "dest")
    report = pull(dest, url)
    assert report.ok and sorted(report.transferred) == ["quant_a", "quant_b", "runtime-x"]
    assert report.transferred[0] == "runtime-x"  # the library before the kernels that link it
    assert set(dest.index(fresh=True)) == set(store.index(fresh=True)) and same_entries(store, dest)
    assert verify(dest).ok
    for key in KEYS.values():
        e = dest.get(key)
        assert (dest.entry_dir(e) / "module.so").read_bytes() == (store.entry_dir(e) / "module.so").read_bytes()


def test_push_twice_uploads_nothing(store: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    push(store, url)
    again = push(store, url)
    assert again.ok and again.transferred == [] and again.files == 0 and again.bytes == 0
    assert len(again.present) == 3


def test_pull_transfers_only_missing(store: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    push(store, url)
    dest = fresh(tmp_path, "dest")
    first = pull(dest, url, only=["quant_a"])
    assert first.transferred == ["runtime-x", "quant_a"]  # a kernel brings its runtime library
    second = pull(dest, url)
    assert second.transferred == ["quant_b"] and second.files == 2 and sorted(second.present) == ["quant_a",
                                                                                                   "runtime-x"]
    third = pull(dest, url)
    assert third.transferred == [] and third.files == 0
    assert verify(dest).ok


def test_pull_over_http(store: CacheStore, tmp_path: Path, http_root: tuple[Path, str]) -> None:
    pytest.importorskip("aiohttp", reason="fsspec's http backend needs aiohttp (pip install 'fsspec[http]')")
    served, http_url = http_root
    push(store, served.as_uri())
    dest = fresh(tmp_path, "dest")
    report = pull(dest, http_url)
    assert report.ok and len(report.transferred) == 3 and same_entries(store, dest) and verify(dest).ok
    with pytest.raises(TransferError, match="read-only"):
        push(store, http_url)
    res = run("push", http_url, "--cache", str(store.root))
    assert res.exit_code == 2 and "read-only" in res.output and "Traceback" not in res.output


def test_corrupted_remote_blob_is_refused(store: CacheStore, tmp_path: Path, http_root) -> None:
    served, http_url = http_root
    url = served.as_uri()
    push(store, url)
    a = store.get(KEYS["a"])
    flip_byte(served / "v1" / "blobs" / a.sha256[:2] / a.sha256)
    dest = fresh(tmp_path, "dest")
    report = pull(dest, url)
    assert [r.key for r in report.refused] == [KEYS["a"]]
    reason = str(report.refused[0])
    assert "quant_a" in reason and "module.so" in reason and url.rstrip("/") in reason and "sha256" in reason
    assert sorted(report.transferred) == ["quant_b", "runtime-x"]
    assert dest.get(KEYS["a"]) is None and not dest.layout.entry_dir(KEYS["a"], "kernel").exists()
    assert list(dest.layout.tmp.iterdir()) == []  # the staging dir is gone too
    assert verify(dest).ok

    res = run("pull", http_url, "--cache", str(fresh(tmp_path, "dest2").root))
    assert res.exit_code == 1 and "REFUSED: quant_a" in res.output and http_url in res.output


def test_corrupted_runtime_refuses_its_kernels(store: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    push(store, url)
    rt = store.get(RKEY)
    flip_byte(tmp_path / "remote" / "v1" / "blobs" / rt.sha256[:2] / rt.sha256)
    dest = fresh(tmp_path, "dest")
    report = pull(dest, url)
    assert report.transferred == [] and len(report.refused) == 3
    assert dest.index(fresh=True) == {}


def test_unreachable_and_bad_remotes_exit_2(store: CacheStore, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the with block ends: connection refused
    dest = str(tmp_path / "dest")
    for url, words in ((f"http://127.0.0.1:{port}/x", "cannot read"),
                       ((tmp_path / "nothing").as_uri(), "has no v1/remote-index.json"),
                       ("nope://bucket/x", "not a usable fsspec URL")):
        res = run("pull", url, "--cache", dest)
        assert res.exit_code == 2, res.output
        assert words in res.output and url.rstrip("/") in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1


def test_push_heals_an_index_that_lost_a_key(store: CacheStore, tmp_path: Path) -> None:
    remote_dir = tmp_path / "remote"
    push(store, remote_dir.as_uri())
    index = json.loads((remote_dir / INDEX_PATH).read_text())
    del index["entries"][KEYS["b"]]  # what a concurrent pusher's index write can do
    (remote_dir / INDEX_PATH).write_text(json.dumps(index))
    report = push(store, remote_dir.as_uri(), only=["quant_a"])
    assert report.transferred == [] and any("re-indexed quant_b" in n for n in report.notes)
    assert KEYS["b"] in (Remote(remote_dir.as_uri()).read_index() or {})


def test_push_refuses_a_damaged_local_entry(store: CacheStore, tmp_path: Path) -> None:
    a = store.get(KEYS["a"])
    flip_byte(store.entry_dir(a) / "module.so")
    report = push(store, (tmp_path / "remote").as_uri())
    assert [r.key for r in report.refused] == [KEYS["a"]] and "cache repair" in report.refused[0].reason
    assert KEYS["a"] not in (Remote((tmp_path / "remote").as_uri()).read_index() or {})


def test_cli_push_pull(store: CacheStore, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    res = run("push", url, "--cache", str(store.root))
    assert res.exit_code == 0 and "3 entries transferred" in res.output, res.output
    res = run("pull", url, "--cache", str(tmp_path / "dest"), "--format", "json")
    assert res.exit_code == 0 and len(json.loads(res.stdout)["transferred"]) == 3


# ---- bundles ----

def test_export_import_round_trip(store: CacheStore, tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar.gz"
    report = export_bundle(store, bundle)
    assert report.ok and len(report.transferred) == 3
    first = bundle.read_bytes()
    export_bundle(store, bundle)
    assert bundle.read_bytes() == first  # deterministic
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        assert names[0] == BUNDLE_INDEX and names[1:] == sorted(names[1:])
        assert {m.mtime for m in tar.getmembers()} == {0} and {m.uid for m in tar.getmembers()} == {0}

    dest = fresh(tmp_path, "dest")
    report = import_bundle(dest, bundle)
    assert report.ok and len(report.transferred) == 3 and same_entries(store, dest) and verify(dest).ok
    again = import_bundle(dest, bundle)
    assert again.transferred == [] and len(again.present) == 3

    res = run("import", str(bundle), "--cache", str(tmp_path / "dest3"), "--verify")
    assert res.exit_code == 0 and "verify: OK" in res.output, res.output


def _rewrite(bundle: Path, out: Path, edit) -> None:
    """Copy a bundle's members into a new .tar.gz, passing each (info, bytes) through `edit`."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            for info, payload in edit(m, data):
                dst.addfile(info, io.BytesIO(payload) if payload is not None else None)


def test_import_rejects_a_corrupted_entry(store: CacheStore, tmp_path: Path) -> None:
    bundle, bad = tmp_path / "b.tar.gz", tmp_path / "bad.tar.gz"
    export_bundle(store, bundle)
    a = store.get(KEYS["a"])

    def edit(m: tarfile.TarInfo, data: bytes):
        if m.name == f"v1/{a.path}/module.so":
            data = data[:10] + bytes([data[10] ^ 0xFF]) + data[11:]
        yield m, data

    _rewrite(bundle, bad, edit)
    dest = fresh(tmp_path, "dest")
    report = import_bundle(dest, bad)
    assert [r.key for r in report.refused] == [KEYS["a"]]
    assert "module.so" in str(report.refused[0]) and str(bad) in str(report.refused[0])
    assert dest.get(KEYS["a"]) is None and sorted(report.transferred) == ["quant_b", "runtime-x"]
    assert verify(dest).ok

    res = run("import", str(bad), "--cache", str(tmp_path / "dest2"))
    assert res.exit_code == 1 and "REFUSED: quant_a" in res.output


@pytest.mark.parametrize("stdlib_filter", [True, False], ids=["with-data_filter", "python-without-data_filter"])
@pytest.mark.parametrize("evil", ["dotdot", "absolute", "symlink", "hardlink", "device", "duplicate"])
def test_import_rejects_a_malicious_tar(store: CacheStore, tmp_path: Path, evil: str, stdlib_filter: bool,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if not stdlib_filter:  # Python before 3.10.12 / 3.11.4 has no tarfile.data_filter (PEP 706)
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        monkeypatch.delattr(tarfile, "FilterError", raising=False)
    bundle, bad = tmp_path / "b.tar.gz", tmp_path / "bad.tar.gz"
    export_bundle(store, bundle)
    outside = tmp_path / "evil"
    a = store.get(KEYS["a"])

    def edit(m: tarfile.TarInfo, data: bytes):
        yield m, data
        if m.name != BUNDLE_INDEX:
            return
        info = tarfile.TarInfo()
        if evil == "dotdot":
            info.name = f"v1/{a.path}/../../../../../../evil"
        elif evil == "absolute":
            info.name = str(outside)
        elif evil == "duplicate":  # a later member would override the verified one
            info.name = f"v1/{a.path}/module.so"
        elif evil in ("symlink", "hardlink"):
            info.name = f"v1/{a.path}/link.so"
            info.type = tarfile.SYMTYPE if evil == "symlink" else tarfile.LNKTYPE
            info.linkname = str(outside)
            yield info, None
            return
        else:
            info.name, info.type = f"v1/{a.path}/dev", tarfile.CHRTYPE
            yield info, None
            return
        info.size = 4
        yield info, b"evil"

    _rewrite(bundle, bad, edit)
    dest = fresh(tmp_path, "dest")
    with pytest.raises(Rejected, match="unsafe"):
        import_bundle(dest, bad)
    assert not outside.exists() and not (tmp_path / "dest" / "evil").exists()
    assert dest.index(fresh=True) == {}
    res = run("import", str(bad), "--cache", str(tmp_path / "dest2"))
    assert res.exit_code == 1 and "unsafe" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_import_missing_or_garbage_file(store: CacheStore, tmp_path: Path) -> None:
    res = run("import", str(tmp_path / "none.tar.gz"), "--cache", str(tmp_path / "dest"))
    assert res.exit_code == 2 and "does not exist" in res.output
    garbage = tmp_path / "g.tar.gz"
    garbage.write_bytes(b"not a tar at all" * 10)
    res = run("import", str(garbage), "--cache", str(tmp_path / "dest"))
    assert res.exit_code == 1 and "not a readable tar" in res.output


def test_malformed_remote_metadata_is_refused(store: CacheStore, tmp_path: Path) -> None:
    remote_dir = tmp_path / "remote"
    push(store, remote_dir.as_uri())
    index = json.loads((remote_dir / INDEX_PATH).read_text())
    index["entries"][KEYS["a"]]["files"]["module.so"]["sha256"] = "../../../../evil"
    (remote_dir / INDEX_PATH).write_text(json.dumps(index))
    dest = fresh(tmp_path, "dest")
    report = pull(dest, remote_dir.as_uri())
    assert [r.key for r in report.refused] == [KEYS["a"]] and "malformed" in report.refused[0].reason
    assert sorted(report.transferred) == ["quant_b", "runtime-x"] and verify(dest).ok


def test_import_of_present_entries_writes_nothing_where_tmp_cannot_be_made(store: CacheStore, tmp_path: Path) -> None:
    """The gzip stream is decompressed beside the cache when it can be, else in the system's temp
    dir: a cache that already holds a bundle's entries imports it without writing (here its tmp/
    path is taken by a regular file, so nothing can be created there)."""
    bundle = tmp_path / "b.tar.gz"
    export_bundle(store, bundle)
    dest = fresh(tmp_path, "dest")
    assert import_bundle(dest, bundle).ok
    for d in dest.layout.tmp.iterdir():
        d.rmdir()
    dest.layout.tmp.rmdir()
    dest.layout.tmp.write_bytes(b"in the way")
    before = {p: p.stat().st_mtime_ns for p in dest.root.rglob("*")}
    report = import_bundle(dest, bundle)
    assert report.ok and report.transferred == [] and len(report.present) == 3
    assert {p: p.stat().st_mtime_ns for p in dest.root.rglob("*")} == before
