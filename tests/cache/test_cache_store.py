"""CacheStore: publish/get, the index as commit marker, failure handling."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.cache import SCHEMA_VERSION, CacheStore, Entry, clean, load_index_for_runtime, verify
from kernelforge.cache import store as store_mod
from kernelforge.errors import CacheError
from tests.cache import _cache_helpers as h


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    return CacheStore(tmp_path / "cache")


def test_publish_get_round_trip(store: CacheStore) -> None:
    key = h.key_of("a")
    staging = store.staging_dir()
    kw = h.meta()
    h.fake_build(b"hello")(staging)
    entry = store.publish(key, staging, **kw)

    assert not staging.exists()
    assert store.get(key) == entry
    assert entry.path == f"artifacts/{key[:2]}/{key}"
    d = store.entry_dir(entry)
    assert d == store.root / f"v{SCHEMA_VERSION}" / "artifacts" / key[:2] / key
    assert (d / "module.so").read_bytes() == b"hello"
    assert set(entry.files) == {"module.so", "sub/kernel.ptx"}
    assert entry.files["module.so"]["size"] == 5
    assert entry.sha256 == h.hashlib.sha256(b"hello").hexdigest()
    assert entry.size == 5 + len("// ptx\n")
    assert json.loads((d / "meta.json").read_text()) == entry.to_json()
    assert Entry.from_json(entry.to_json()) == entry
    assert entry.variant == kw["variant"] and entry.toolchain_id == "tc-aaaa"
    assert store.index() == {key: entry}
    assert verify(store).ok


def test_runtime_entry_layout_and_runtime_read(store: CacheStore) -> None:
    kernel, runtime = h.key_of("k"), h.key_of("rt")
    store.get_or_build(kernel, h.fake_build(b"K"))
    store.get_or_build(runtime, h.fake_build(b"R", kind="runtime", op="runtime", name="libkf_runtime"))
    assert store.get(runtime).path == f"runtime/{runtime}"
    idx = load_index_for_runtime(store.root)
    assert set(idx) == {kernel, runtime}
    assert Path(idx[kernel]["main_path"]).read_bytes() == b"K"
    assert idx[runtime]["sha256"] == h.hashlib.sha256(b"R").hexdigest()


def test_get_or_build_builds_once(store: CacheStore) -> None:
    calls = []

    def build(staging: Path) -> dict:
        calls.append(staging)
        return h.fake_build()(staging)

    key = h.key_of("once")
    e1, built1 = store.get_or_build(key, build)
    e2, built2 = store.get_or_build(key, build)
    assert (built1, built2) == (True, False)
    assert e1 == e2 and len(calls) == 1
    assert list(store.layout.tmp.iterdir()) == []


def test_index_is_written_last(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after the directory moved into place but before the index write leaves an orphan, not an entry."""
    key = h.key_of("crash")

    def crash(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt("simulated crash before the index write")

    monkeypatch.setattr(store_mod, "write_index", crash)
    with pytest.raises(KeyboardInterrupt):
        store.get_or_build(key, h.fake_build())
    monkeypatch.undo()

    final = store.layout.entry_dir(key, "kernel")
    assert final.is_dir()  # the move happened ...
    assert store.get(key) is None and store.index() == {}  # ... but it is not an entry
    # An intact, recorded entry the index lacks is not debris: clean keeps it, verify flags it,
    # repair re-indexes it.
    assert [(d, e.key) for d, e in store.unindexed() if e is not None] == [(final, key)]
    assert store.orphans() == []
    assert [p.problem for p in verify(store).problems] == ["entry not in the index"]
    assert clean(store).orphans_removed == [] and final.is_dir()
    from kernelforge.cache.maintenance.repair import repair

    assert repair(store).reindexed == [store.read_meta(final).name]
    assert store.get(key) is not None and verify(store).ok


def test_republish_over_orphan_replaces_it(store: CacheStore) -> None:
    key = h.key_of("stale")
    final = store.layout.entry_dir(key, "kernel")
    final.mkdir(parents=True)
    (final / "junk").write_text("left by a crash")
    entry, built = store.get_or_build(key, h.fake_build(b"new"))
    assert built and not (final / "junk").exists()
    assert (store.entry_dir(entry) / "module.so").read_bytes() == b"new"


def test_publish_existing_key_discards_staging(store: CacheStore) -> None:
    key = h.key_of("dup")
    first, _ = store.get_or_build(key, h.fake_build(b"first"))
    staging = store.staging_dir()
    h.fake_build(b"second")(staging)
    again = store.publish(key, staging, **h.meta())
    assert again == first and not staging.exists()
    assert (store.entry_dir(first) / "module.so").read_bytes() == b"first"


def test_publish_from_outside_tmp_copies(store: CacheStore, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    h.fake_build(b"x")(outside)
    entry = store.publish(h.key_of("outside"), outside, **h.meta())
    assert outside.is_dir()  # the caller's directory is left alone
    assert (store.entry_dir(entry) / "module.so").read_bytes() == b"x"


def test_build_raising_leaves_nothing(store: CacheStore) -> None:
    def build(staging: Path) -> dict:
        (staging / "module.so").write_bytes(b"partial")
        raise RuntimeError("compiler exploded")

    key = h.key_of("boom")
    with pytest.raises(RuntimeError, match="compiler exploded"):
        store.get_or_build(key, build)
    assert store.get(key) is None and store.index() == {}
    assert list(store.layout.tmp.iterdir()) == []
    assert store.layout.artifact_dirs() == [] and store.orphans() == []


def test_build_without_main_file_is_an_error(store: CacheStore) -> None:
    def build(staging: Path) -> dict:
        (staging / "other.o").write_bytes(b"o")
        return h.meta()

    with pytest.raises(CacheError, match="module.so"):
        store.get_or_build(h.key_of("nomain"), build)
    assert store.index() == {} and list(store.layout.tmp.iterdir()) == []


def test_bad_build_return_and_bad_key(store: CacheStore) -> None:
    with pytest.raises(CacheError, match="expected a mapping"):
        store.get_or_build(h.key_of("none"), lambda staging: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(CacheError, match="invalid cache key"):
        store.get_or_build("../escape", h.fake_build())
    with pytest.raises(CacheError, match="invalid entry kind"):
        store.get_or_build(h.key_of("kind"), h.fake_build(kind="plugin"))
    assert store.index() == {}


@pytest.mark.parametrize("content", ["{not json", json.dumps([1, 2]), json.dumps({"schema": 99, "entries": {}})])
def test_corrupt_index_is_empty_with_warning(store: CacheStore, content: str) -> None:
    key = h.key_of("c")
    store.get_or_build(key, h.fake_build())
    store.layout.index.write_text(content)
    with pytest.warns(RuntimeWarning, match="index"):
        assert store.index() == {}
    with pytest.warns(RuntimeWarning):
        assert store.get(key) is None
    with pytest.raises(CacheError, match="cache repair"):
        load_index_for_runtime(store.root)  # never an empty cache silently
    # writers refuse to replace a corrupt index (that would forget every entry) ...
    with pytest.warns(RuntimeWarning), pytest.raises(CacheError, match="cache repair"):
        store.get_or_build(h.key_of("other"), h.fake_build())
    # ... and repair rebuilds it from the entries' meta.json, losing nothing
    from kernelforge.cache.maintenance.repair import repair

    assert repair(store).index_problem is not None
    assert set(store.index()) == {key} and verify(store).ok


def test_malformed_entry_is_skipped(store: CacheStore) -> None:
    good, bad = h.key_of("good"), h.key_of("bad")
    store.get_or_build(good, h.fake_build())
    raw = json.loads(store.layout.index.read_text())
    raw["entries"][bad] = {"key": bad, "path": "../../etc"}
    store.layout.index.write_text(json.dumps(raw))
    with pytest.warns(RuntimeWarning, match="malformed"):
        assert set(store.index()) == {good}


def test_missing_dir_is_a_miss(store: CacheStore) -> None:
    key = h.key_of("gone")
    entry, _ = store.get_or_build(key, h.fake_build())
    shutil.rmtree(store.entry_dir(entry))
    assert store.get(key) is None
    _, built = store.get_or_build(key, h.fake_build())
    assert built


def test_read_only_use_creates_nothing(tmp_path: Path) -> None:
    store = CacheStore(tmp_path / "absent")
    assert store.index() == {} and store.get(h.key_of("x")) is None and store.orphans() == []
    assert not (tmp_path / "absent").exists()


def test_cache_package_imports_neither_torch_nor_cutlass() -> None:
    code = ("import sys, kernelforge.cache, kernelforge.config;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','cutlass')];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parsed_index_is_reused_until_the_file_changes(store: CacheStore) -> None:
    a, b = h.key_of("memo-a"), h.key_of("memo-b")
    store.get_or_build(a, h.fake_build())
    first = store.index()
    assert store.index() == first and store._memo is not None
    other = CacheStore(store.root)  # another process's view of the same cache
    other.get_or_build(b, h.fake_build())
    assert set(store.index()) == {a, b} and store.get(b) is not None
    assert len({store.get(a), other.get(a)}) == 1  # entries hash by key
