"""`kernelforge.quantize` argument checks on CPU tensors, `nvfp4_global_scale`, and dispatch
preference order over a fake index. No GPU and no compiler needed.

`quantize` checks every argument before it checks that x is on CUDA, so each error below is
raised exactly as it would be on a GPU; a fully valid CPU call ends at the CUDA check.
"""
from __future__ import annotations

import re

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
    """(data shape, scale shape) per docs/numerics.md."""
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


@pytest.mark.parametrize("fmt,lead,layout", CASES, ids=[f"{f}-{'x'.join(map(str, lead))}-{y}" for f, lead, y in CASES])
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


# ---------------------------------------------------------------- the ops' fast-call memo


def test_fast_path_needs_the_very_same_buffers(monkeypatch):
    """A memoized call is repeated only while the very same buffer objects live: the entry is
    keyed by their ids and dropped (weak-reference callbacks) as soon as one of them dies, so a
    new tensor that reuses a dead one's id never finds it."""
    import gc

    from kernelforge.ops import fast_path

    monkeypatch.setattr(fast_path, "fast_calls", {})
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    d = torch.empty(4, 64, dtype=torch.float8_e4m3fn)
    s = torch.empty(4, 2, dtype=torch.float8_e8m0fnu)
    calls = []
    key = ("quantize", x.shape, x.stride(), x.dtype, x.get_device(), "mxfp8", "linear", "floor", id(d), id(s), id(None))
    fast_path.remember_fast(key, lambda *a: calls.append(a), (d, s, None), None, x, (d, s))
    assert kernelforge.quantize(x, "mxfp8", out=(d, s)) == (d, s)
    assert len(calls) == 1 and calls[0][0] is x and calls[0][1] is d and calls[0][2] is s
    calls.clear()  # (it holds d)
    del d
    gc.collect()
    assert key not in fast_path.fast_calls
    d = torch.empty(4, 64, dtype=torch.float8_e4m3fn)  # may or may not reuse the dead id
    with pytest.raises(ValueError, match="CUDA"):
        kernelforge.quantize(x, "mxfp8", out=(d, s))
    assert not calls


def test_fast_call_memo_is_bounded_and_reset_with_the_cache_root(monkeypatch, tmp_path):
    from kernelforge.ops import fast_path, launch

    monkeypatch.setattr(fast_path, "fast_calls", {})
    t = torch.empty(1)
    for i in range(fast_path.MAX_FAST_CALLS + 5):
        fast_path.remember_fast(("k", i), print, (t, None), None, t, (t,))
    assert 0 < len(fast_path.fast_calls) <= fast_path.MAX_FAST_CALLS
    entry = fast_path.fast_calls[("k", fast_path.MAX_FAST_CALLS + 4)]
    assert len(entry.refs) == 1 and entry.refs[0]() is t  # None holds no reference
    old = launch.dispatch_table().root
    try:
        launch.set_cache_root(tmp_path)
        assert fast_path.fast_calls == {}
    finally:
        launch.set_cache_root(old)


@pytest.mark.parametrize("m, k", [(4, 64), (0, 64), (130, 256)])
def test_allocating_fast_path_makes_fresh_contiguous_outputs(monkeypatch, m, k):
    """A remembered allocating call makes new (data, scale) tensors of the remembered shapes and
    dtypes on every call (empty_like of one-element templates), never the templates' memory nor
    an earlier call's outputs."""
    from kernelforge.ops import fast_path

    monkeypatch.setattr(fast_path, "fast_calls", {})
    x = torch.randn(m, k, dtype=torch.bfloat16)
    d_shape, s_shape = (m, k), (m, k // 32)
    calls = []
    key = ("quantize", x.shape, x.stride(), x.dtype, x.get_device(), "mxfp8", "linear", "floor", id(None))
    fast_path.remember_fast(key, lambda *a: calls.append(a), (None,), None, x, (),
                          (d_shape, s_shape, torch.float8_e4m3fn, torch.float8_e8m0fnu, x.device))
    template = fast_path.fast_calls[key].alloc[0]
    assert template.untyped_storage().nbytes() == 1  # a template holds one element, whatever the shape
    seen, alive = set(), []  # outputs kept alive so that no address is reused
    for _ in range(3):
        d, s = kernelforge.quantize(x, "mxfp8")
        assert (d.shape, d.dtype, s.shape, s.dtype) == (d_shape, torch.float8_e4m3fn, s_shape, torch.float8_e8m0fnu)
        assert d.is_contiguous() and s.is_contiguous()
        assert calls[-1][1] is d and calls[-1][2] is s
        for t in (d, s):
            if t.numel():
                assert t.data_ptr() not in seen and t.data_ptr() != template.data_ptr()
                seen.add(t.data_ptr())
        alive += [d, s]
    assert len(calls) == 3
