"""`kernelforge.quantize` argument checks on CPU tensors, `nvfp4_global_scale`, and dispatch
preference order over a fake index. No GPU and no compiler needed.

`quantize` checks every argument before it checks that x is on CUDA, so each error below is
raised exactly as it would be on a GPU; a fully valid CPU call ends at the CUDA check.
"""
from __future__ import annotations

import re
import shutil

import json

import pytest
import torch

import kernelforge
from kernelforge.formats import FORMATS, SWIZZLE_COLS, SWIZZLE_ROWS

quantize = kernelforge.quantize
CUDA_ONLY = r"x: expected a CUDA tensor, got a tensor on cpu"
MX = ("mxfp8", "mxfp4")
ALL = ("mxfp8", "mxfp4", "nvfp4")


def x_of(fmt: str, m: int = 4, k: int | None = None, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.zeros(m, k if k is not None else 4 * FORMATS[fmt].block, dtype=dtype)


def shapes(fmt: str, lead: tuple[int, ...], k: int, layout: str):
    """(data shape, scale shape) per NUMERICS.md."""
    f = FORMATS[fmt]
    m = 1
    for d in lead:
        m *= d
    data = (*lead, k * f.element_bits // 8)
    kb = k // f.block
    if layout == "linear":
        return data, (m, kb)
    up = lambda n, r: (n + r - 1) // r * r  # noqa: E731
    return data, (up(m, SWIZZLE_ROWS), up(kb, SWIZZLE_COLS))


def out_of(fmt: str, d_shape, s_shape, *, d_dtype=None, s_dtype=None):
    f = FORMATS[fmt]
    return (torch.empty(d_shape, dtype=d_dtype or getattr(torch, f.data_dtype)),
            torch.empty(s_shape, dtype=s_dtype or getattr(torch, f.scale_dtype)))


# ---------------------------------------------------------------- format and x


@pytest.mark.parametrize("fmt", ["mxfp6", "MXFP8", "", None, 8, FORMATS["mxfp8"]])
def test_bad_format(fmt):
    with pytest.raises(ValueError, match=r"^format: expected one of \['mxfp4', 'mxfp8', 'nvfp4'\]"):
        quantize(x_of("mxfp8"), fmt)


@pytest.mark.parametrize("x", [None, [[1.0] * 32], 3.0], ids=["None", "list", "float"])
def test_x_not_a_tensor(x):
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor, got "):
        quantize(x, "mxfp8")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.uint8, torch.float64, torch.bool,
                                   torch.float8_e4m3fn])
def test_unsupported_dtype(dtype):
    with pytest.raises(ValueError, match=r"^x: expected dtype bfloat16, float16 or float32, got "):
        quantize(torch.zeros(2, 32, dtype=dtype), "mxfp8")


def test_zero_dim():
    with pytest.raises(ValueError, match=r"^x: expected at least one dimension"):
        quantize(torch.tensor(1.0), "mxfp8")


@pytest.mark.parametrize("fmt", ALL)
def test_k_not_a_multiple_of_the_block(fmt):
    b = FORMATS[fmt].block
    for k in (b + 1, b // 2, 3 * b - 8, 1):
        with pytest.raises(ValueError) as ei:
            quantize(x_of(fmt, k=k), fmt)
        msg = str(ei.value)
        assert msg.startswith("x: ") and f"K = {k}" in msg and f"B = {b}" in msg and fmt in msg, msg


@pytest.mark.parametrize("layout", ["swizzle", "LINEAR", "", None, 0])
def test_bad_layout(layout):
    with pytest.raises(ValueError, match=r"^layout: expected one of \['linear', 'swizzled'\], got "):
        quantize(x_of("mxfp8"), "mxfp8", layout=layout)


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("mode", ["none", "ceil", "FLOOR", "", None])
def test_bad_scale_mode_for_mx(fmt, mode):
    with pytest.raises(ValueError, match=r"^scale_mode: expected one of \['floor', 'rceil'\] for " + fmt):
        quantize(x_of(fmt), fmt, scale_mode=mode)


@pytest.mark.parametrize("mode", ["rceil", "ceil"])
def test_scale_mode_with_nvfp4(mode):
    with pytest.raises(ValueError, match=r"^scale_mode: nvfp4 has E4M3 block scales and no scale mode .*; got "):
        quantize(x_of("nvfp4"), "nvfp4", scale_mode=mode)


def test_explicit_none_scale_mode_with_nvfp4_is_accepted():
    # Passes every argument check and stops only at the (last) CUDA device check.
    with pytest.raises(ValueError, match=r"^x: expected a CUDA tensor"):
        quantize(x_of("nvfp4"), "nvfp4", scale_mode="none")


# ---------------------------------------------------------------- global_scale


@pytest.mark.parametrize("fmt", MX)
def test_global_scale_with_an_mx_format(fmt):
    with pytest.raises(ValueError, match=rf"^global_scale: only NVFP4 takes a global scale; {fmt} must be"):
        quantize(x_of(fmt), fmt, global_scale=torch.ones(1))


@pytest.mark.parametrize("g", [1.0, [1.0], None.__class__], ids=["float", "list", "type"])
def test_global_scale_wrong_type(g):
    with pytest.raises(TypeError, match=r"^global_scale: expected a float32 CUDA tensor of shape \[1\] or None"):
        quantize(x_of("nvfp4"), "nvfp4", global_scale=g)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int32])
def test_global_scale_wrong_dtype(dtype):
    with pytest.raises(ValueError, match=r"^global_scale: expected dtype torch.float32, got "):
        quantize(x_of("nvfp4"), "nvfp4", global_scale=torch.ones(1, dtype=dtype))


@pytest.mark.parametrize("shape", [(), (2,), (1, 1), (0,), (4, 4)])
def test_global_scale_wrong_shape(shape):
    with pytest.raises(ValueError, match=r"^global_scale: expected shape \[1\], got "):
        quantize(x_of("nvfp4"), "nvfp4", global_scale=torch.ones(shape))


def test_global_scale_on_another_device():
    with pytest.raises(ValueError, match=r"^global_scale: expected a tensor on cpu \(the device of x\), got meta"):
        quantize(x_of("nvfp4"), "nvfp4", global_scale=torch.ones(1, device="meta"))


def test_valid_global_scale_reaches_the_cuda_check():
    with pytest.raises(ValueError, match=CUDA_ONLY):
        quantize(x_of("nvfp4"), "nvfp4", global_scale=torch.full((1,), 3.5))


# ---------------------------------------------------------------- strides


@pytest.mark.parametrize("fmt", ALL)
def test_non_contiguous_last_dim(fmt):
    x = torch.zeros(4 * FORMATS[fmt].block, 64, dtype=torch.float16).t()  # [64, K], stride(-1) = 64
    with pytest.raises(ValueError, match=r"^x: the last dimension must be contiguous \(stride 1\), got stride 64"):
        quantize(x, fmt)


def test_row_strided_input_is_accepted():
    x = torch.zeros(8, 128, dtype=torch.bfloat16)[:, :64]  # padded rows: stride(0) = 128
    with pytest.raises(ValueError, match=CUDA_ONLY):
        quantize(x, "mxfp8")


# ---------------------------------------------------------------- out=


@pytest.mark.parametrize("out", [torch.empty(4, 128), [torch.empty(1)], (), "data,scale", 5],
                         ids=["tensor", "list1", "empty", "str", "int"])
def test_out_not_a_pair(out):
    with pytest.raises(TypeError, match=r"^out: expected a \(data, scale\) tuple of tensors, got "):
        quantize(x_of("mxfp8"), "mxfp8", out=out)


def test_out_three_items():
    d, s = out_of("mxfp8", (4, 128), (4, 4))
    with pytest.raises(TypeError, match=r"^out: expected a \(data, scale\) tuple"):
        quantize(x_of("mxfp8"), "mxfp8", out=(d, s, s))


def test_out_items_not_tensors():
    d, s = out_of("mxfp8", (4, 128), (4, 4))
    with pytest.raises(TypeError, match=r"^out\[0\] \(data\): expected a torch.Tensor, got NoneType"):
        quantize(x_of("mxfp8"), "mxfp8", out=(None, s))
    with pytest.raises(TypeError, match=r"^out\[1\] \(scale\): expected a torch.Tensor, got ndarray"):
        quantize(x_of("mxfp8"), "mxfp8", out=(d, s.view(torch.uint8).numpy()))


@pytest.mark.parametrize("fmt", ALL)
def test_out_wrong_dtype(fmt):
    x = x_of(fmt)
    d_shape, s_shape = shapes(fmt, (4,), x.shape[-1], "linear")
    f = FORMATS[fmt]
    for which, kw in (("out[0] (data)", {"d_dtype": torch.int8}), ("out[0] (data)", {"d_dtype": torch.float16}),
                      ("out[1] (scale)", {"s_dtype": torch.int8}), ("out[1] (scale)", {"s_dtype": torch.float32})):
        want = f.data_dtype if which.startswith("out[0]") else f.scale_dtype
        with pytest.raises(ValueError) as ei:
            quantize(x, fmt, out=out_of(fmt, d_shape, s_shape, **kw))
        msg = str(ei.value)
        assert msg.startswith(f"{which}: expected dtype torch.{want} (or torch.uint8), got "), msg
    # The scale dtype of another format family is wrong too.
    other = torch.float8_e4m3fn if f.scale_dtype == "float8_e8m0fnu" else torch.float8_e8m0fnu
    with pytest.raises(ValueError, match=re.escape("out[1] (scale): expected dtype")):
        quantize(x, fmt, out=out_of(fmt, d_shape, s_shape, s_dtype=other))


CASES = [(fmt, lead, layout) for fmt in ALL for lead in [(4,), (3, 5), (200,), (1,)]
         for layout in ("linear", "swizzled")]


@pytest.mark.parametrize("fmt,lead,layout", CASES, ids=[f"{f}-{'x'.join(map(str, l))}-{y}" for f, l, y in CASES])
def test_out_shapes(fmt, lead, layout):
    b = FORMATS[fmt].block
    k = 6 * b  # 6 scale columns: swizzled pads them to 8
    x = torch.zeros(*lead, k, dtype=torch.float32)
    d_shape, s_shape = shapes(fmt, lead, k, layout)
    # The expected shapes pass every check (in the format's dtypes and as uint8) and reach the CUDA check.
    for kw in ({}, {"d_dtype": torch.uint8, "s_dtype": torch.uint8}):
        with pytest.raises(ValueError, match=CUDA_ONLY):
            quantize(x, fmt, layout=layout, out=out_of(fmt, d_shape, s_shape, **kw))
    m = 1
    for dd in lead:
        m *= dd
    if layout == "swizzled":
        assert s_shape[0] % 128 == 0 and s_shape[1] == 8
    else:
        assert s_shape == (m, 6)
    bad_data = [(*d_shape[:-1], d_shape[-1] + 1), (m, d_shape[-1]) if len(lead) > 1 else (1, *d_shape),
                (*d_shape[:-1], k)]
    bad_scale = [(s_shape[0] + 1, s_shape[1]), (s_shape[0], s_shape[1] - 1), (s_shape[0] * s_shape[1],),
                 shapes(fmt, lead, k, "linear" if layout == "swizzled" else "swizzled")[1]]
    cases = [("out[0] (data)", d_shape, bad, (bad, s_shape)) for bad in bad_data]
    cases += [("out[1] (scale)", s_shape, bad, (d_shape, bad)) for bad in bad_scale]
    for name, good, bad, (data_shape, scale_shape) in cases:
        if tuple(bad) == tuple(good):
            continue
        with pytest.raises(ValueError) as ei:
            quantize(x, fmt, layout=layout, out=out_of(fmt, data_shape, scale_shape))
        assert str(ei.value) == f"{name}: expected shape {list(good)}, got {list(bad)}"


def test_out_non_contiguous():
    x = x_of("mxfp8", m=6)  # data [6, 128], scale [6, 4]
    d, s = out_of("mxfp8", (6, 128), (6, 4))
    d_nc = torch.empty(128, 6, dtype=torch.uint8).t()
    s_nc = torch.empty(4, 6, dtype=torch.uint8).t()
    with pytest.raises(ValueError, match=re.escape("out[0] (data): expected a contiguous tensor")):
        quantize(x, "mxfp8", out=(d_nc, s))
    with pytest.raises(ValueError, match=re.escape("out[1] (scale): expected a contiguous tensor")):
        quantize(x, "mxfp8", out=(d, s_nc))


def test_out_misaligned():
    x = x_of("mxfp8", m=2)  # data [2, 128], scale [2, 4]
    d, s = out_of("mxfp8", (2, 128), (2, 4))
    d_off = torch.empty(2 * 128 + 1, dtype=torch.uint8)[1:].view(2, 128)
    with pytest.raises(ValueError, match=re.escape("out[0] (data): expected a 16-byte aligned data pointer")):
        quantize(x, "mxfp8", out=(d_off, s))
    s_off = torch.empty(2 * 4 + 2, dtype=torch.uint8)[2:].view(2, 4)
    with pytest.raises(ValueError, match=re.escape("out[1] (scale): expected a 4-byte aligned data pointer")):
        quantize(x, "mxfp8", out=(d, s_off))


def test_out_on_another_device():
    d, s = out_of("mxfp8", (4, 128), (4, 4))
    with pytest.raises(ValueError, match=re.escape("out[0] (data): expected a tensor on cpu (the device of x), got meta")):
        quantize(x_of("mxfp8"), "mxfp8", out=(d.to("meta"), s))


# ---------------------------------------------------------------- a valid CPU call


@pytest.mark.parametrize("fmt", ALL)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_valid_cpu_call_names_cuda(fmt, dtype, layout):
    modes = FORMATS[fmt].scale_modes if fmt in MX else ("floor",)
    for mode in modes:
        for x in (x_of(fmt, dtype=dtype), torch.zeros(0, 64, dtype=dtype), torch.zeros(3, 0, dtype=dtype)):
            with pytest.raises(ValueError, match=CUDA_ONLY):
                quantize(x, fmt, layout=layout, scale_mode=mode)


def test_valid_cpu_call_1d():
    with pytest.raises(ValueError, match=CUDA_ONLY):
        quantize(torch.zeros(64), "mxfp8")


# ---------------------------------------------------------------- nvfp4_global_scale


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_nvfp4_global_scale(dtype):
    x = torch.tensor([[0.5, -3.0, 2.0, 0.0], [1.0, 1.5, -0.25, 2.5]], dtype=dtype)
    g = kernelforge.nvfp4_global_scale(x)
    assert g.dtype == torch.float32 and g.shape == (1,) and g.device == x.device
    assert g.item() == pytest.approx(448.0 * 6.0 / 3.0, rel=1e-6)
    x3 = torch.randn(2, 3, 16, dtype=dtype) * 7
    g3 = kernelforge.nvfp4_global_scale(x3)
    assert g3.shape == (1,)
    assert g3.item() == pytest.approx(448.0 * 6.0 / x3.float().abs().max().item(), rel=1e-6)


@pytest.mark.parametrize("x", [torch.zeros(4, 32), torch.zeros(0, 16), torch.zeros(3, 0), -torch.zeros(5)],
                         ids=["zeros", "empty-rows", "empty-k", "negative-zeros"])
def test_nvfp4_global_scale_of_zeros_is_one(x):
    g = kernelforge.nvfp4_global_scale(x)
    assert g.dtype == torch.float32 and g.shape == (1,)
    assert g.item() == 1.0


def test_nvfp4_global_scale_errors():
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor"):
        kernelforge.nvfp4_global_scale([1.0])
    with pytest.raises(ValueError, match=r"^x: expected dtype bfloat16, float16 or float32"):
        kernelforge.nvfp4_global_scale(torch.ones(4, dtype=torch.float64))


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
    from kernelforge.runtime import dispatch

    loaded = []

    def fake_load(trusted, entry, runtime):
        loaded.append((entry["name"], runtime and runtime["key"]))
        return entry["name"]

    monkeypatch.setattr(dispatch, "load_function", fake_load)
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
    from kernelforge.cache import index as index_mod
    from kernelforge.runtime import dispatch

    class NoViews(index_mod.DispatchViews):
        def __init__(self, root, trusted=None):
            super().__init__(root, trusted)
            self.manifest = None

    monkeypatch.setattr(dispatch, "DispatchViews", NoViews)
    full = dispatch.DispatchTable(fake_cache)
    expected = _all_groups(full)
    assert full._full and any(expected)
    monkeypatch.setattr(dispatch, "DispatchViews", index_mod.DispatchViews)

    def no_index(root):
        raise AssertionError("the full index was read although matching views exist")

    monkeypatch.setattr(dispatch, "load_index_for_runtime", no_index)
    table = dispatch.DispatchTable(fake_cache)
    assert _all_groups(table) == expected
    assert table._stale == full._stale and table._stale  # the rceil builds come from other sources
    assert set(table._runtimes) == set(full._runtimes) == {"rt" * 32}


def test_dispatch_views_of_another_index_are_ignored(fake_cache):
    from kernelforge.cache import index as index_mod
    from kernelforge.cache.layout import Layout
    from kernelforge.runtime import dispatch

    expected = _all_groups(dispatch.DispatchTable(fake_cache))
    layout = Layout(fake_cache)
    text = layout.index.read_text()
    views = layout.schema_root / index_mod.VIEWS_DIR
    manifest = (views / index_mod.MANIFEST).read_text()
    try:
        # The index rewritten by a writer that does not know about views (or a crash between
        # the two writes): the manifest no longer matches and the runtime reads the index itself.
        gen = index_mod.index_generation(layout.index)
        index_mod.atomic_write_text(layout.index, text.replace(gen, "0" * 32))  # a crash before the views
        assert (views / index_mod.MANIFEST).read_text() == manifest
        assert index_mod.DispatchViews(fake_cache).manifest is None
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        index_mod.atomic_write_text(layout.index, json.dumps(json.loads(text) | {"generation": None}))  # older writer
        assert index_mod.DispatchViews(fake_cache).manifest is None
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        # Rewritten views match again; a group file that vanished (a concurrent writer
        # replaced it) or a corrupt manifest sends the runtime to the index as well.
        index_mod.write_index(layout.index, index_mod.read_index(layout.index))
        assert index_mod.DispatchViews(fake_cache).manifest is not None
        for f in (views / "groups").glob("*.json"):
            f.unlink()
        table = dispatch.DispatchTable(fake_cache)
        assert _all_groups(table) == expected and table._full
        (views / index_mod.MANIFEST).write_text("{not json")
        assert index_mod.DispatchViews(fake_cache).manifest is None
    finally:
        index_mod.write_index(layout.index, index_mod.read_index(layout.index))
    assert not dispatch.DispatchTable(fake_cache)._full and _all_groups(dispatch.DispatchTable(fake_cache)) == expected


def test_refresh_views_rewrites_views_that_do_not_match(fake_cache):
    from kernelforge.cache import index as index_mod
    from kernelforge.cache.layout import Layout
    from kernelforge.cache.store import CacheStore

    store = CacheStore(fake_cache)
    assert store.refresh_views() is False  # they match
    layout = Layout(fake_cache)
    entries = index_mod.read_index(layout.index)
    index_mod.atomic_write_text(layout.index, json.dumps({"schema": 1, "entries": entries}))  # an older writer
    assert index_mod.index_generation(layout.index) is None
    assert index_mod.DispatchViews(fake_cache).manifest is None
    assert store.refresh_views() is True
    assert index_mod.DispatchViews(fake_cache).manifest is not None


def test_dispatch_not_built_message(fake_cache, monkeypatch):
    from kernelforge.errors import KernelNotBuilt
    from kernelforge.runtime import dispatch

    monkeypatch.setattr(dispatch, "load_function", lambda t, e, r: pytest.fail("nothing should be loaded"))
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


def test_fast_path_needs_the_very_same_buffers(monkeypatch):
    """A memoized call is repeated only for the same buffer objects (weak references, not ids)."""
    from kernelforge.ops import _common

    monkeypatch.setattr(_common, "fast_calls", {})
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    d = torch.empty(4, 64, dtype=torch.float8_e4m3fn)
    s = torch.empty(4, 2, dtype=torch.float8_e8m0fnu)
    calls = []
    key = ("quantize", x.shape, x.stride(), x.dtype, x.get_device(), "mxfp8", "linear", "floor", id(d), id(s), id(None))
    _common.remember_fast(key, lambda *a: calls.append(a), (d, s, None), None, x, (d, s))
    assert kernelforge.quantize(x, "mxfp8", out=(d, s)) == (d, s)
    assert len(calls) == 1 and calls[0][0] is x and calls[0][1] is d and calls[0][2] is s
    # Other objects under the same ids (as after garbage collection) must not match.
    other = torch.empty_like(d)
    _common.remember_fast(key, lambda *a: calls.append(a), (other, s, None), None, x, (other, s))
    with pytest.raises(ValueError, match="CUDA"):
        kernelforge.quantize(x, "mxfp8", out=(d, s))
    assert len(calls) == 1


def test_fast_call_memo_is_bounded_and_reset_with_the_cache_root(monkeypatch, tmp_path):
    from kernelforge.ops import _common

    monkeypatch.setattr(_common, "fast_calls", {})
    t = torch.empty(1)
    for i in range(_common.MAX_FAST_CALLS + 5):
        _common.remember_fast(("k", i), print, (t, None), None, t, (t,))
    assert 0 < len(_common.fast_calls) <= _common.MAX_FAST_CALLS
    entry = _common.fast_calls[("k", _common.MAX_FAST_CALLS + 4)]
    assert entry.refs[0]() is t and entry.refs[1]() is None
    old = _common.dispatch_table().root
    try:
        _common.set_cache_root(tmp_path)
        assert _common.fast_calls == {}
    finally:
        _common.set_cache_root(old)
