"""Dispatch over a fake index on the CPU: preference order among a cache's builds, the
most specialized K-class that accepts a call, the dispatch views, and the "not built" message.
No GPU and no compiler needed: module files are dummies and `load_function` is replaced.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

# ---------------------------------------------------------------- dispatch over a fake index


def _kernel_meta(name, fmt, arch, kclass, kmb, vb, src, *, mode="floor", dtype="bfloat16", layout="linear"):
    axes = {"format": fmt, "scale_mode": mode, "layout": layout, "dtype": dtype, "kclass": kclass,
            "arch": arch, "threads": 128, "units_per_thread": 1}
    return dict(kind="kernel", op="quantize", name=name,
                variant={"axes": dict(sorted(axes.items())), "op": "quantize",
                         "kclass": {"k_multiple_blocks": kmb, "name": kclass, "vector_bytes": vb}},
                arch=arch, toolchain_id="tc", toolchain={}, source_hash=src, main_file="module.so",
                build_time_s=0.0, extra={"symbol": "kf_" + name.replace(".", "_"), "runtime_key": "rt" * 32,
                                         # what the builder records for the runtime to match on
                                         "dispatch": {"format": fmt, "scale_mode": mode, "layout": layout,
                                                      "dtype": dtype}})


@pytest.fixture(scope="module")
def fake_cache(tmp_path_factory):
    """A cache root whose index.json was written by CacheStore.publish, with dummy files."""
    import hashlib

    from kernelforge.cache import CacheStore
    from kernelforge.sources import source_hash

    tmp_path = tmp_path_factory.mktemp("fake")
    src = source_hash("quantize")
    store = CacheStore(tmp_path / "cache")
    metas = []
    for fmt in ("mxfp8", "nvfp4"):
        mode = "none" if fmt == "nvfp4" else "floor"
        for arch in ("sm_90a", "sm_100a", "sm_100f"):
            for kclass, kmb, vb in (("any", 1, 0), ("aligned", 4, 16)):
                name = f"quantize.{fmt}.{mode}.linear.bfloat16.{kclass}.{arch}.t128u1"
                metas.append(_kernel_meta(name, fmt, arch, kclass, kmb, vb, src, mode=mode))
    # Same coordinates as mxfp8/floor but rceil, built from other kernel sources only: stale.
    for arch in ("sm_90a", "sm_100a"):
        metas.append(_kernel_meta(f"quantize.mxfp8.rceil.linear.bfloat16.any.{arch}.t128u1", "mxfp8", arch,
                                  "any", 1, 0, "0" * 64, mode="rceil"))
    for meta in metas:
        staging = tmp_path / "stage"
        staging.mkdir()
        (staging / "module.so").write_bytes(meta["name"].encode())
        store.publish(hashlib.sha256(meta["name"].encode() + meta["source_hash"].encode()).hexdigest(),
                      staging, **meta)
        shutil.rmtree(staging)  # publish copied it (it lies outside the cache's tmp/)
    staging = tmp_path / "stage"
    staging.mkdir()
    (staging / "libkfrt-x.so").write_bytes(b"runtime")
    store.publish("rt" * 32, staging, kind="runtime", op="runtime", name="runtime-x", variant={}, arch="host",
                  toolchain_id="tc", toolchain={}, source_hash="", main_file="libkfrt-x.so", build_time_s=0.0)
    return store.root


COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}


def test_dispatch_preference_order(fake_cache):
    from kernelforge.runtime.dispatch import DispatchTable

    table = DispatchTable(fake_cache)
    # Hopper: only the sm_90a builds run there (arch-specific code runs on its exact capability).
    c90 = table.candidates("quantize", COORDS, (9, 0))
    assert [(c.kclass.name, c.arch) for c in c90] == [("aligned", "sm_90a"), ("any", "sm_90a")]
    assert c90[0].entry["name"] == "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1"
    # Blackwell 10.0: exact sm_100a before the sm_100f family build, aligned before any.
    c100 = table.candidates("quantize", COORDS, (10, 0))
    assert [(c.kclass.name, c.arch) for c in c100] == [("aligned", "sm_100a"), ("aligned", "sm_100f"),
                                                  ("any", "sm_100a"), ("any", "sm_100f")]
    # 10.3: sm_100a does not run there, the family build does.
    c103 = table.candidates("quantize", COORDS, (10, 3))
    assert [(c.kclass.name, c.arch) for c in c103] == [("aligned", "sm_100f"), ("any", "sm_100f")]
    # Nothing for sm_120 (and a different op/coords has no candidates at all).
    assert table.candidates("quantize", COORDS, (12, 0)) == []
    assert table.candidates("quantize", dict(COORDS, layout="swizzled"), (9, 0)) == []
    nv = table.candidates("quantize", {**COORDS, "format": "nvfp4", "scale_mode": "none"}, (9, 0))
    assert [c.entry["variant"]["axes"]["format"] for c in nv] == ["nvfp4", "nvfp4"]


def test_dispatch_resolve_picks_the_most_specialized_accepting_class(fake_cache, monkeypatch):
    from kernelforge.runtime import dispatch, layer_reader

    loaded = []

    def fake_load(trusted, entry, runtime):
        loaded.append((entry["name"], runtime and runtime["key"]))
        return entry["name"]

    monkeypatch.setattr(layer_reader, "load_function", fake_load)
    table = dispatch.DispatchTable(fake_cache)
    fn, cand = table.resolve("quantize", COORDS, (9, 0), 256, 32, 256, 512)
    assert fn == "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1" and cand.kclass.name == "aligned"
    assert loaded[-1][1] == "rt" * 32  # the runtime entry the module was linked against
    # K not a multiple of 4 blocks, a misaligned pointer or row stride: the "any" class.
    for kb, align, stride in ((6, 256, 512), (8, 8, 512), (8, 256, 520)):
        fn, cand = table.resolve("quantize", COORDS, (9, 0), kb * 32, 32, align, stride)
        assert fn == "quantize.mxfp8.floor.linear.bfloat16.any.sm_90a.t128u1", (kb, align, stride)
    fn, _ = table.resolve("quantize", COORDS, (10, 0), 256, 32, 16, 16)
    assert fn == "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_100a.t128u1"


def _all_groups(table, caps=((9, 0), (10, 0), (10, 3))):
    coords = [COORDS, {**COORDS, "scale_mode": "rceil"}, {**COORDS, "format": "nvfp4", "scale_mode": "none"}]
    return [[(c.entry["key"], c.entry["main_path"], c.arch) for c in table.candidates("quantize", co, cap)]
            for co in coords for cap in caps]


def test_dispatch_views_serve_the_first_call_without_reading_the_index(fake_cache, monkeypatch):
    from kernelforge.cache.read import views as views_mod
    from kernelforge.runtime import dispatch, layer_reader

    class NoViews(views_mod.DispatchViews):
        def __init__(self, root, trusted=None, signed=None):
            super().__init__(root, trusted, signed)
            self.manifest = None

    monkeypatch.setattr(layer_reader, "DispatchViews", NoViews)
    full = dispatch.DispatchTable(fake_cache)
    expected = _all_groups(full)
    assert full._full and any(expected)
    monkeypatch.setattr(layer_reader, "DispatchViews", views_mod.DispatchViews)

    def no_index(root):
        raise AssertionError("the full index was read although matching views exist")

    monkeypatch.setattr(layer_reader, "load_index_for_runtime", no_index)
    table = dispatch.DispatchTable(fake_cache)
    assert _all_groups(table) == expected
    assert table._stale == full._stale and table._stale  # the rceil builds come from other sources
    assert set(table._runtimes) == set(full._runtimes) == {"rt" * 32}


def test_dispatch_views_of_another_index_are_ignored(fake_cache):
    from kernelforge.cache.read import fsio
    from kernelforge.cache.read import index as index_mod
    from kernelforge.cache.read import views as views_mod
    from kernelforge.cache.read.layout import Layout
    from kernelforge.runtime import dispatch

    expected = _all_groups(dispatch.DispatchTable(fake_cache))
    layout = Layout(fake_cache)
    text = layout.index.read_text()
    views = layout.schema_root / views_mod.VIEWS_DIR
    manifest = (views / views_mod.MANIFEST).read_text()
    try:
        # The index rewritten by a writer that does not know about views (or a crash between
        # the two writes): the manifest no longer matches and the runtime reads the index itself.
        gen = index_mod.index_generation(layout.index)
        fsio.atomic_write_text(layout.index, text.replace(gen, "0" * 32))  # a crash before the views
        assert (views / views_mod.MANIFEST).read_text() == manifest
        assert views_mod.DispatchViews(fake_cache).manifest is None
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        fsio.atomic_write_text(layout.index, json.dumps(json.loads(text) | {"generation": None}))  # older writer
        assert views_mod.DispatchViews(fake_cache).manifest is None
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        # Rewritten views match again; a group file that vanished (a concurrent writer
        # replaced it) or a corrupt manifest sends the runtime to the index as well.
        index_mod.write_index(layout.index, index_mod.read_index(layout.index))
        assert views_mod.DispatchViews(fake_cache).manifest is not None
        for f in (views / "groups").glob("*.json"):
            f.unlink()
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        (views / views_mod.MANIFEST).write_text("{not json")
        assert views_mod.DispatchViews(fake_cache).manifest is None
    finally:
        index_mod.write_index(layout.index, index_mod.read_index(layout.index))
    assert not dispatch.DispatchTable(fake_cache)._full and _all_groups(dispatch.DispatchTable(fake_cache)) == expected


def test_refresh_views_rewrites_views_that_do_not_match(fake_cache):
    from kernelforge.cache.read import fsio
    from kernelforge.cache.read import index as index_mod
    from kernelforge.cache.read import views as views_mod
    from kernelforge.cache.read.layout import Layout
    from kernelforge.cache.store import CacheStore

    store = CacheStore(fake_cache)
    assert store.refresh_views() is False  # they match
    layout = Layout(fake_cache)
    entries = index_mod.read_index(layout.index)
    fsio.atomic_write_text(layout.index, json.dumps({"schema": 1, "entries": entries}))  # an older writer
    assert index_mod.index_generation(layout.index) is None
    assert views_mod.DispatchViews(fake_cache).manifest is None
    assert store.refresh_views() is True
    assert views_mod.DispatchViews(fake_cache).manifest is not None


def test_dispatch_not_built_message(fake_cache, monkeypatch):
    from kernelforge.errors import KernelNotBuilt
    from kernelforge.runtime import dispatch, layer_reader

    monkeypatch.setattr(layer_reader, "load_function", lambda t, e, r: pytest.fail("nothing should be loaded"))
    table = dispatch.DispatchTable(fake_cache)
    # Stale entries (another source_hash) are ignored ...
    rceil = dict(COORDS, scale_mode="rceil")
    assert table.candidates("quantize", rceil, (9, 0)) == []
    with pytest.raises(KernelNotBuilt) as ei:
        table.resolve("quantize", rceil, (9, 0), 256, 32, 256, 512)
    assert isinstance(ei.value, LookupError)
    msg = str(ei.value)
    for part in ("quantize", "bfloat16", "mxfp8", "linear", "rceil", "capability 9.0", "sm_90a", str(fake_cache),
                 f"kernelforge build --cache {fake_cache} --arch sm_90a", "other kernel sources", "2 cached"):
        assert part in msg, (part, msg)
    # ... and no candidate for the device's arch is "not built" too, without the stale note.
    with pytest.raises(KernelNotBuilt) as ei:
        table.resolve("quantize", COORDS, (12, 0), 256, 32, 256, 512)
    msg = str(ei.value)
    # no default spec declares an arch that runs on 12.0: the hint says so rather than suggest a failing command
    assert "capability 12.0" in msg and "No spec declares an arch that runs on capability 12.0" in msg
    assert str(fake_cache) in msg and "--arch sm_120a" not in msg
    assert "floor" in msg and "other kernel sources" not in msg
    nb = table.not_built("quantize", dict(COORDS, dtype="float16"), (10, 0))
    assert isinstance(nb, KernelNotBuilt) and "float16" in str(nb) and "--arch sm_100a" in str(nb)


def test_dispatch_on_a_missing_cache(tmp_path):
    from kernelforge.errors import KernelNotBuilt
    from kernelforge.runtime.dispatch import DispatchTable

    root = tmp_path / "nothing-here"
    table = DispatchTable(root)
    assert table.candidates("quantize", COORDS, (9, 0)) == []
    with pytest.raises(KernelNotBuilt, match=re.escape(f"kernelforge build --cache {root} --arch sm_90a")):
        table.resolve("quantize", COORDS, (9, 0), 128, 32, 16, 16)
    assert not root.exists()  # reading never creates anything
