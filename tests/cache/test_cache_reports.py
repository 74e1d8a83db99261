"""verify, stats and clean over a small fake cache."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore, clean, stats, verify
from tests.cache import _cache_helpers as h


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    s = CacheStore(tmp_path / "cache")
    s.get_or_build(h.key_of("a"), h.fake_build(b"aaaa", name="q_mxfp8", arch="sm_90a", source_hash="s1"))
    s.get_or_build(h.key_of("b"), h.fake_build(b"bbbbbbbb", name="q_nvfp4", arch="sm_90a", source_hash="s1"))
    s.get_or_build(h.key_of("c"), h.fake_build(b"cc", name="q_mxfp8", arch="sm_100a", toolchain_id="tc-old",
                                               source_hash="s2"))
    s.get_or_build(h.key_of("rt"), h.fake_build(b"r", kind="runtime", op="runtime", name="libkf",
                                                arch="any"))
    return s


def _main(store: CacheStore, key: str) -> Path:
    return store.entry_dir(store.index()[key]) / "module.so"


def test_verify_ok(store: CacheStore) -> None:
    report = verify(store)
    assert report.ok and report.entries == 4 and report.files == 8 and report.problems == []
    json.dumps(report.to_dict())


def test_verify_detects_flipped_byte(store: CacheStore) -> None:
    path = _main(store, h.key_of("b"))
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify(store)
    assert not report.ok
    assert [(p.key, p.name, p.problem, p.file) for p in report.problems] == [
        (h.key_of("b"), "q_nvfp4", "sha256 mismatch", "module.so")]


def test_verify_detects_missing_and_truncated_files(store: CacheStore) -> None:
    _main(store, h.key_of("a")).unlink()
    _main(store, h.key_of("c")).write_bytes(b"c")
    entry = store.index()[h.key_of("rt")]
    import shutil
    shutil.rmtree(store.entry_dir(entry))
    problems = {(p.key, p.problem) for p in verify(store).problems}
    assert problems == {(h.key_of("a"), "missing file"), (h.key_of("c"), "size mismatch"),
                        (h.key_of("rt"), "missing dir")}


def test_stats_groups(store: CacheStore) -> None:
    report = stats(store)
    sidecar = len("// ptx\n")
    assert report.entries == 4
    assert report.bytes == 4 + 8 + 2 + 1 + 4 * sidecar
    groups = {k: (g.entries, g.bytes) for k, g in report.by_kind_op_arch.items()}
    assert groups == {
        ("kernel", "quantize", "sm_90a"): (2, 12 + 2 * sidecar),
        ("kernel", "quantize", "sm_100a"): (1, 2 + sidecar),
        ("runtime", "runtime", "any"): (1, 1 + sidecar),
    }
    assert {t: g.entries for t, g in report.by_toolchain.items()} == {"tc-aaaa": 3, "tc-old": 1}
    d = json.loads(json.dumps(report.to_dict()))
    assert d["entries"] == 4 and len(d["by_kind_op_arch"]) == 3 and d["orphans"] == 0


def test_stats_empty_cache(tmp_path: Path) -> None:
    report = stats(CacheStore(tmp_path / "none"))
    assert report.entries == 0 and report.bytes == 0 and report.to_dict()["by_toolchain"] == []


def test_clean_stale_toolchain(store: CacheStore) -> None:
    report = clean(store, keep_toolchain_id="tc-aaaa")
    assert report.removed == [h.key_of("c")] and report.removed_bytes == 2 + len("// ptx\n")
    assert set(store.index()) == {h.key_of("a"), h.key_of("b"), h.key_of("rt")}
    assert store.orphans() == [] and verify(store).ok


def test_clean_stale_sources(store: CacheStore) -> None:
    report = clean(store, keep_source_hashes={"s1"})
    assert set(report.removed) == {h.key_of("c")}  # a runtime library has no kernel sources to be stale
    assert set(store.index()) == {h.key_of("a"), h.key_of("b"), h.key_of("rt")}


def test_clean_all_and_orphans(store: CacheStore) -> None:
    orphan = store.layout.entry_dir(h.key_of("orphan"), "kernel")
    orphan.mkdir(parents=True)
    (orphan / "module.so").write_bytes(b"o")
    assert store.orphans() == [orphan]

    nothing = clean(store, orphans=False)
    assert nothing.removed == [] and nothing.orphans_removed == [] and orphan.exists()

    report = clean(store, all=True)
    assert len(report.removed) == 4 and report.orphans_removed == [orphan]
    assert store.index() == {} and store.layout.artifact_dirs() == [] and store.orphans() == []
    assert json.loads(store.layout.index.read_text())["entries"] == {}


def test_remove_returns_count(store: CacheStore) -> None:
    assert store.remove([h.key_of("a"), "not-a-key"]) == 1
    assert store.get(h.key_of("a")) is None and store.orphans() == []
    assert store.remove([]) == 0


def test_exported_functions_survive_submodule_imports():
    """`kernelforge.cache.verify` / `clean` / `stats` are the functions, whichever of the cache's
    modules were imported first (their modules have other names, so an import cannot rebind them)."""
    import importlib

    import kernelforge.cache as cache

    for module in ("maintenance.verification", "maintenance.cleaning", "maintenance.statistics"):
        importlib.import_module(f"kernelforge.cache.{module}")
    assert callable(cache.verify) and callable(cache.clean) and callable(cache.stats)
    assert cache.verify.__module__ == "kernelforge.cache.maintenance.verification"
