"""Grouped quantization on the CPU: the references (`quantize_experts_ref`, `quantize_grouped_ref`)
against `quantize_ref`, every argument check of `quantize_experts` / `quantize_grouped`, their
torch.library fake implementations and torch.compile tracing. No GPU and no compiler needed.

Both ops check every argument before they check that the input is on CUDA, so each error
below is raised exactly as it would be on a GPU; a fully valid CPU call ends at the CUDA check.
"""
from __future__ import annotations

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelforge
import kernelforge.ops  # noqa: F401  (registers torch.ops.kernelforge.*)
from kernelforge.families.quantize_grouped.op import MAX_GROUPS, grouped_rows
from kernelforge.families.quantize_grouped.reference import quantize_experts_ref, quantize_grouped_ref
from kernelforge.formats import FORMATS
from kernelforge.testing.references import from_swizzled, quantize_ref
from tests.ops._compile_helpers import capture

quantize_experts = kernelforge.quantize_experts
quantize_grouped = kernelforge.quantize_grouped
ALL = ("mxfp8", "mxfp4", "nvfp4")
COMBOS = [(f, m) for f in FORMATS for m in FORMATS[f].scale_modes]
W_CUDA_ONLY = r"^w: expected a CUDA tensor, got a tensor on cpu"
X_CUDA_ONLY = r"^x: expected a CUDA tensor, got a tensor on cpu"


def _mode(mode: str) -> str:
    return "floor" if mode == "none" else mode


def _random(*shape: int, dtype=torch.float32) -> torch.Tensor:
    mag = torch.exp2(torch.empty(shape).uniform_(-10, 10))
    return (mag * torch.where(torch.rand(shape) < 0.5, -1.0, 1.0)).to(dtype)


def _offsets(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


def _roundup(n: int, m: int) -> int:
    return (n + m - 1) // m * m


# ---------------------------------------------------------------- references


@pytest.mark.parametrize("fmt,mode", COMBOS)
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_experts_ref_is_quantize_ref_per_expert(fmt, mode, layout):
    b = FORMATS[fmt].block
    e, n, k = 3, 130, 6 * b  # N not a multiple of 128, 6 scale columns (swizzled: 8)
    w = _random(e, n, k, dtype=torch.bfloat16)
    g = torch.tensor([0.5, 3.0, 1000.0]) if FORMATS[fmt].has_global_scale else None
    data, scale = quantize_experts_ref(w, fmt, layout=layout, scale_mode=_mode(mode), global_scale=g)
    rows = n if layout == "linear" else 256
    assert data.shape == (e, n, k * FORMATS[fmt].element_bits // 8) and data.dtype == torch.uint8
    assert scale.shape == (e, rows, 6 if layout == "linear" else 8) and scale.dtype == torch.uint8
    for i in range(e):
        rd, rs = quantize_ref(w[i], fmt, layout=layout, scale_mode=_mode(mode),
                              global_scale=None if g is None else g[i:i + 1])
        assert torch.equal(data[i], rd) and torch.equal(scale[i], rs)
    # One global scale [1] applies to every expert; linear scales are plain rowwise ones of [E*N, K].
    d1, s1 = quantize_experts_ref(w, fmt, layout="linear", scale_mode=_mode(mode),
                                  global_scale=None if g is None else g[1:2])
    rd, rs = quantize_ref(w.reshape(e * n, k), fmt, scale_mode=_mode(mode), global_scale=None if g is None else g[1:2])
    assert torch.equal(d1.reshape(e * n, -1), rd) and torch.equal(s1.reshape(e * n, -1), rs)


def test_experts_ref_padding_and_empty():
    w = _random(2, 1, 64)
    _, scale = quantize_experts_ref(w, "mxfp8")
    assert scale.shape == (2, 128, 4)
    for i in range(2):
        assert torch.equal(from_swizzled(scale[i], 1, 2), quantize_ref(w[i], "mxfp8")[1])
        assert int(scale[i].count_nonzero()) <= 2  # everything but row 0's two scales is padding
    d0, s0 = quantize_experts_ref(torch.zeros(0, 5, 64), "nvfp4")
    assert d0.shape == (0, 5, 32) and s0.shape == (0, 128, 4)
    with pytest.raises(ValueError, match=r"^w: expected a 3-D tensor"):
        quantize_experts_ref(w[0], "mxfp8")


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_grouped_ref_layout(fmt, mode):
    """Uneven and empty groups (first, middle, last): data is rowwise quantize of x; each group's
    swizzled scales sit at its scale offset; every other scale row is zero."""
    b = FORMATS[fmt].block
    sizes = [0, 1, 127, 0, 128, 129, 3, 0]
    ends = torch.tensor(sizes).cumsum(0).to(torch.int32)
    t, k = int(ends[-1]), 5 * b
    x = _random(t, k)
    g = torch.rand(len(sizes)) * 100 + 1 if FORMATS[fmt].has_global_scale else None
    data, scale, offs = quantize_grouped_ref(x, ends, fmt, scale_mode=_mode(mode), global_scale=g)
    r = 128 * ((t + 127 * len(sizes)) // 128)
    assert scale.shape == (r, 8) and offs.dtype == torch.int32
    want_offs = [0]
    for s in sizes[:-1]:
        want_offs.append(want_offs[-1] + _roundup(s, 128))
    assert offs.tolist() == want_offs
    used = torch.zeros(r, dtype=torch.bool)
    begin = 0
    for i, (size, start) in enumerate(zip(sizes, want_offs)):
        xs = x[begin:begin + size]
        rd, rs = quantize_ref(xs, fmt, layout="swizzled", scale_mode=_mode(mode),
                              global_scale=None if g is None else g[i:i + 1])
        assert torch.equal(data[begin:begin + size], rd)
        block = scale[start:start + _roundup(size, 128)]
        assert torch.equal(block, rs)
        if size:
            assert torch.equal(from_swizzled(block, size, 5), quantize_ref(xs, fmt, scale_mode=_mode(mode),
                               global_scale=None if g is None else g[i:i + 1])[1])
        used[start:start + _roundup(size, 128)] = True
        begin += size
    assert not scale[~used].any()  # rows of no group, including everything after the last one
    if g is None:
        assert torch.equal(data, quantize_ref(x, fmt, scale_mode=_mode(mode))[0])


def test_grouped_ref_single_group_is_swizzled_quantize():
    x = _random(300, 128, dtype=torch.float16)
    data, scale, offs = quantize_grouped_ref(x, _offsets(300), "mxfp4", scale_mode="rceil")
    rd, rs = quantize_ref(x, "mxfp4", layout="swizzled", scale_mode="rceil")
    assert torch.equal(data, rd) and torch.equal(scale[:384], rs) and offs.tolist() == [0]
    assert scale.shape == (grouped_rows(300, 1), 4) == (384, 4)


def test_grouped_ref_all_empty_and_bad_offsets():
    data, scale, offs = quantize_grouped_ref(torch.zeros(0, 64), _offsets(0, 0, 0), "nvfp4")
    assert data.shape == (0, 32) and scale.shape == (256, 4) and not scale.any() and offs.tolist() == [0, 0, 0]
    x = torch.zeros(10, 64)
    for bad in ((5, 3, 10), (-1, 10), (5, 9), ()):
        with pytest.raises(ValueError, match=r"^group_offsets: expected non-decreasing"):
            quantize_grouped_ref(x, torch.tensor(bad, dtype=torch.int32), "mxfp8")


@pytest.mark.parametrize("t", [0, 1, 127, 128, 129, 1000])
@pytest.mark.parametrize("groups", [1, 2, 7, 128, 1024])
def test_scale_rows_bound_every_grouping(t, groups):
    """R bounds the sum of the rounded-up sizes for the worst split (one row in each group but
    the last), and is a multiple of 128."""
    r = grouped_rows(t, groups)
    assert r % 128 == 0
    worst = sum(_roundup(s, 128) for s in [1] * min(groups - 1, t) + [t - min(groups - 1, t)])
    assert worst <= r


# ---------------------------------------------------------------- quantize_experts arguments


def w_of(fmt: str, e: int = 2, n: int = 4, k: int | None = None, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.zeros(e, n, k if k is not None else 4 * FORMATS[fmt].block, dtype=dtype)


@pytest.mark.parametrize("fmt", ["mxfp6", "", None])
def test_experts_bad_format(fmt):
    with pytest.raises(ValueError, match=r"^format: expected one of \['mxfp4', 'mxfp8', 'nvfp4'\]"):
        quantize_experts(w_of("mxfp8"), fmt)


def test_experts_bad_layout_and_mode():
    with pytest.raises(ValueError, match=r"^layout: expected one of"):
        quantize_experts(w_of("mxfp8"), "mxfp8", layout="tiled")
    with pytest.raises(ValueError, match=r"^scale_mode: expected one of \['floor', 'rceil'\] for mxfp8"):
        quantize_experts(w_of("mxfp8"), "mxfp8", scale_mode="none")
    with pytest.raises(ValueError, match=r"^scale_mode: nvfp4 has E4M3 block scales"):
        quantize_experts(w_of("nvfp4"), "nvfp4", scale_mode="rceil")


def test_experts_w_type_dtype_and_rank():
    with pytest.raises(TypeError, match=r"^w: expected a torch.Tensor, got list"):
        quantize_experts([[[0.0] * 32]], "mxfp8")
    with pytest.raises(ValueError, match=r"^w: expected dtype bfloat16, float16 or float32, got torch.float64"):
        quantize_experts(w_of("mxfp8", dtype=torch.float64), "mxfp8")
    for shape in ((4, 64), (1, 2, 3, 64), (64,)):
        with pytest.raises(ValueError, match=re.escape(f"w: expected a 3-D tensor [E, N, K], got shape {list(shape)}")):
            quantize_experts(torch.zeros(shape), "mxfp8")


@pytest.mark.parametrize("fmt", ALL)
def test_experts_k_not_a_multiple_of_the_block(fmt):
    b = FORMATS[fmt].block
    with pytest.raises(ValueError) as ei:
        quantize_experts(w_of(fmt, k=b + 8), fmt)
    msg = str(ei.value)
    assert msg.startswith("w: ") and f"K = {b + 8}" in msg and f"B = {b}" in msg, msg


def test_experts_not_contiguous():
    w = torch.zeros(4, 2, 64).transpose(0, 1)  # [2, 4, 64], experts interleaved
    with pytest.raises(ValueError, match=r"^w: expected a contiguous tensor"):
        quantize_experts(w, "mxfp8")
    with pytest.raises(ValueError, match=r"^w: expected a contiguous tensor"):
        quantize_experts(torch.zeros(2, 4, 128)[:, :, :64], "mxfp8")


def test_experts_global_scale():
    w = w_of("nvfp4", e=3)
    with pytest.raises(ValueError, match=r"^global_scale: only NVFP4 takes a global scale"):
        quantize_experts(w_of("mxfp8"), "mxfp8", global_scale=torch.ones(1))
    with pytest.raises(TypeError, match=re.escape("global_scale: expected a float32 CUDA tensor of shape [1] or [3] "
                                                  "(one per expert) or None, got float")):
        quantize_experts(w, "nvfp4", global_scale=1.0)
    with pytest.raises(ValueError, match=r"^global_scale: expected dtype torch.float32"):
        quantize_experts(w, "nvfp4", global_scale=torch.ones(3, dtype=torch.float64))
    for shape in ((), (2,), (4,), (3, 1), (1, 1)):
        with pytest.raises(ValueError, match=re.escape(f"global_scale: expected shape [1] or [3] (one per expert), "
                                                       f"got {list(shape)}")):
            quantize_experts(w, "nvfp4", global_scale=torch.ones(shape))
    with pytest.raises(ValueError, match=r"^global_scale: expected a contiguous tensor"):
        quantize_experts(w, "nvfp4", global_scale=torch.ones(6)[::2])
    with pytest.raises(ValueError, match=re.escape("global_scale: expected a tensor on cpu (the device of w), got meta")):
        quantize_experts(w, "nvfp4", global_scale=torch.ones(3, device="meta"))
    for g in (torch.ones(1), torch.ones(3)):
        with pytest.raises(ValueError, match=W_CUDA_ONLY):
            quantize_experts(w, "nvfp4", global_scale=g)


@pytest.mark.parametrize("fmt", ALL)
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_experts_out_buffers(fmt, layout):
    f = FORMATS[fmt]
    k = 6 * f.block
    w = torch.zeros(2, 130, k)
    d_shape = (2, 130, k * f.element_bits // 8)
    s_shape = (2, 130, 6) if layout == "linear" else (2, 256, 8)
    d_dtype, s_dtype = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
    for dd, sd in ((d_dtype, s_dtype), (torch.uint8, torch.uint8)):
        with pytest.raises(ValueError, match=W_CUDA_ONLY):
            quantize_experts(w, fmt, layout=layout, out=(torch.empty(d_shape, dtype=dd), torch.empty(s_shape, dtype=sd)))
    bad_s = (2, 130, 8) if layout == "swizzled" else (2, 256, 8)
    with pytest.raises(ValueError, match=re.escape(f"out[1] (scale): expected shape {list(s_shape)}, got {list(bad_s)}")):
        quantize_experts(w, fmt, layout=layout, out=(torch.empty(d_shape, dtype=d_dtype), torch.empty(bad_s, dtype=s_dtype)))
    with pytest.raises(ValueError, match=re.escape("out[0] (data): expected shape")):
        quantize_experts(w, fmt, layout=layout, out=(torch.empty(260, d_shape[-1], dtype=d_dtype),
                                                     torch.empty(s_shape, dtype=s_dtype)))
    with pytest.raises(ValueError, match=re.escape(f"out[0] (data): expected dtype torch.{f.data_dtype} (or torch.uint8)")):
        quantize_experts(w, fmt, layout=layout, out=(torch.empty(d_shape, dtype=torch.int8),
                                                     torch.empty(s_shape, dtype=s_dtype)))
    with pytest.raises(ValueError, match=re.escape("out[0] (data): expected a tensor on meta (the device of w), got cpu")):
        quantize_experts(w.to("meta"), fmt, layout=layout, out=(torch.empty(d_shape, dtype=d_dtype),
                                                                torch.empty(s_shape, dtype=s_dtype)))
    with pytest.raises(TypeError, match=r"^out: expected a \(data, scale\) tuple"):
        quantize_experts(w, fmt, layout=layout, out=torch.empty(1))


def test_experts_valid_call_reaches_the_cuda_check():
    for shape in ((2, 4, 64), (0, 4, 64), (3, 0, 64), (3, 4, 0)):
        with pytest.raises(ValueError, match=W_CUDA_ONLY):
            quantize_experts(torch.zeros(shape), "mxfp8", layout="swizzled")


# ---------------------------------------------------------------- quantize_grouped arguments


def x_of(fmt: str, t: int = 10, k: int | None = None, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.zeros(t, k if k is not None else 4 * FORMATS[fmt].block, dtype=dtype)


def test_grouped_format_and_mode():
    with pytest.raises(ValueError, match=r"^format: expected one of"):
        quantize_grouped(x_of("mxfp8"), _offsets(10), "fp8")
    with pytest.raises(ValueError, match=r"^scale_mode: expected one of \['floor', 'rceil'\] for mxfp4"):
        quantize_grouped(x_of("mxfp4"), _offsets(10), "mxfp4", scale_mode="ceil")
    with pytest.raises(ValueError, match=r"^scale_mode: nvfp4 has E4M3 block scales"):
        quantize_grouped(x_of("nvfp4"), _offsets(10), "nvfp4", scale_mode="floor2")
    with pytest.raises(TypeError):
        quantize_grouped(x_of("mxfp8"), _offsets(10), "mxfp8", layout="swizzled")  # no layout choice


def test_grouped_x_checks():
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor, got NoneType"):
        quantize_grouped(None, _offsets(10), "mxfp8")
    with pytest.raises(ValueError, match=r"^x: expected dtype bfloat16, float16 or float32, got torch.int32"):
        quantize_grouped(x_of("mxfp8", dtype=torch.int32), _offsets(10), "mxfp8")
    for shape in ((2, 5, 64), (64,)):
        with pytest.raises(ValueError, match=re.escape(f"x: expected a 2-D tensor [T, K], got shape {list(shape)}")):
            quantize_grouped(torch.zeros(shape), _offsets(10), "mxfp8")
    with pytest.raises(ValueError, match=r"^x: K = 48 \(the last dimension\) must be a multiple of the mxfp8 block"):
        quantize_grouped(torch.zeros(10, 48), _offsets(10), "mxfp8")
    with pytest.raises(ValueError, match=r"^x: K = 0 \(the last dimension\) must be a positive multiple"):
        quantize_grouped(torch.zeros(10, 0), _offsets(10), "mxfp8")
    with pytest.raises(ValueError, match=r"^x: the last dimension must be contiguous \(stride 1\), got stride 10"):
        quantize_grouped(torch.zeros(64, 10).t(), _offsets(10), "mxfp8")
    with pytest.raises(ValueError, match=X_CUDA_ONLY):  # a row stride is fine
        quantize_grouped(torch.zeros(10, 128)[:, :64], _offsets(10), "mxfp8")


def test_grouped_offsets_checks():
    x = x_of("mxfp8")
    with pytest.raises(TypeError, match=r"^group_offsets: expected a 1-D int32 tensor \[G\] of cumulative group "
                                        r"ends, got list"):
        quantize_grouped(x, [10], "mxfp8")
    for dtype in (torch.int64, torch.float32, torch.uint8):
        with pytest.raises(ValueError, match=rf"^group_offsets: expected dtype torch.int32, got {dtype}"):
            quantize_grouped(x, torch.tensor([10], dtype=dtype), "mxfp8")
    for bad in (torch.tensor(10, dtype=torch.int32), torch.full((1, 1), 10, dtype=torch.int32)):
        with pytest.raises(ValueError, match=r"^group_offsets: expected a 1-D tensor \[G\], got shape"):
            quantize_grouped(x, bad, "mxfp8")
    for g in (0, MAX_GROUPS + 1):
        with pytest.raises(ValueError, match=rf"^group_offsets: expected 1 to {MAX_GROUPS} groups, got G = {g}"):
            quantize_grouped(x, torch.full((g,), 10, dtype=torch.int32), "mxfp8")
    with pytest.raises(ValueError, match=r"^group_offsets: expected a contiguous tensor"):
        quantize_grouped(x, torch.tensor([5, 0, 10, 0], dtype=torch.int32)[::2], "mxfp8")
    with pytest.raises(ValueError, match=re.escape("group_offsets: expected a tensor on cpu (the device of x), got meta")):
        quantize_grouped(x, torch.zeros(2, dtype=torch.int32, device="meta"), "mxfp8")


@pytest.mark.parametrize("ends,msg", [
    ((-1, 10), "group_offsets[0] = -1 must be >= 0"),
    ((5, 4, 10), "group_offsets[1] = 4 is less than group_offsets[0] = 5"),
    ((0, 10, 9), "group_offsets[2] = 9 is less than group_offsets[1] = 10"),
    ((3, 9), "the last value must be T = 10 (the rows of x), got 9"),
    ((3, 11), "the last value must be T = 10 (the rows of x), got 11"),
])
def test_grouped_offset_values(ends, msg):
    """check_offsets=True reads the values (a sync) and names the first bad one; by default they
    are never read on the host, so the same call goes on to the (CUDA) launch checks."""
    with pytest.raises(ValueError, match=re.escape(f"group_offsets: {msg}" if "last" in msg else msg)):
        quantize_grouped(x_of("mxfp8"), _offsets(*ends), "mxfp8", check_offsets=True)
    with pytest.raises(ValueError, match=X_CUDA_ONLY):
        quantize_grouped(x_of("mxfp8"), _offsets(*ends), "mxfp8")
    from kernelforge.families.quantize_grouped.op import group_offsets_valid

    flag = group_offsets_valid(_offsets(*ends), 10)
    assert flag.dtype == torch.bool and flag.shape == () and not bool(flag)


@pytest.mark.parametrize("ends", [(10,), (0, 10), (0, 0, 10), (10, 10, 10), (1, 2, 3, 10)])
def test_group_offsets_valid_accepts_valid_ends(ends):
    from kernelforge.families.quantize_grouped.op import group_offsets_valid

    assert bool(group_offsets_valid(_offsets(*ends), 10))
    assert not bool(group_offsets_valid(_offsets(*ends), 11))
    with pytest.raises(ValueError, match=r"^t: expected the number of rows"):
        group_offsets_valid(_offsets(*ends), -1)
    for bad in (list(ends), torch.zeros(0, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32)):
        with pytest.raises(ValueError, match=r"^group_offsets: expected a non-empty 1-D tensor"):
            group_offsets_valid(bad, 10)
    with pytest.raises(TypeError, match=r"^check_offsets: expected a bool, got str"):
        quantize_grouped(x_of("mxfp8"), _offsets(*ends), "mxfp8", check_offsets="yes")


@pytest.mark.parametrize("ends", [(10,), (0, 10), (0, 0, 10), (10, 10, 10), (1, 2, 3, 10)])
def test_grouped_valid_offsets_reach_the_cuda_check(ends):
    with pytest.raises(ValueError, match=X_CUDA_ONLY):
        quantize_grouped(x_of("mxfp8"), _offsets(*ends), "mxfp8")
    with pytest.raises(ValueError, match=X_CUDA_ONLY):  # T = 0: every group empty
        quantize_grouped(x_of("mxfp8", t=0), _offsets(*[0] * len(ends)), "mxfp8")


def test_grouped_global_scale():
    x, offs = x_of("nvfp4"), _offsets(2, 5, 10)
    with pytest.raises(ValueError, match=r"^global_scale: only NVFP4"):
        quantize_grouped(x_of("mxfp4"), offs, "mxfp4", global_scale=torch.ones(1))
    for shape in ((2,), (4,), ()):
        with pytest.raises(ValueError, match=re.escape(f"global_scale: expected shape [1] or [3] (one per group), "
                                                       f"got {list(shape)}")):
            quantize_grouped(x, offs, "nvfp4", global_scale=torch.ones(shape))
    with pytest.raises(ValueError, match=re.escape("global_scale: expected a tensor on cpu (the device of x)")):
        quantize_grouped(x, offs, "nvfp4", global_scale=torch.ones(3, device="meta"))
    for g in (torch.ones(1), torch.ones(3)):
        with pytest.raises(ValueError, match=X_CUDA_ONLY):
            quantize_grouped(x, offs, "nvfp4", global_scale=g)


@pytest.mark.parametrize("fmt", ALL)
def test_grouped_out_buffers(fmt):
    f = FORMATS[fmt]
    k = 6 * f.block
    x, offs = torch.zeros(300, k), _offsets(0, 100, 300)
    d_shape, s_shape = (300, k * f.element_bits // 8), (grouped_rows(300, 3), 8)
    assert s_shape == (640, 8)
    d_dtype, s_dtype = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)

    def out(d=d_shape, s=s_shape, o=(3,), dd=d_dtype, sd=s_dtype, od=torch.int32):
        return torch.empty(d, dtype=dd), torch.empty(s, dtype=sd), torch.empty(o, dtype=od)

    for good in (out(), out(dd=torch.uint8, sd=torch.uint8), list(out())):
        with pytest.raises(ValueError, match=X_CUDA_ONLY):
            quantize_grouped(x, offs, fmt, out=good)
    for bad in (out()[:2], torch.empty(1), None.__class__):
        with pytest.raises(TypeError, match=r"^out: expected a \(data, scale, scale_offsets\) tuple of tensors"):
            quantize_grouped(x, offs, fmt, out=bad)
    cases = [
        (out(o=(4,)), "out[2] (scale_offsets): expected shape [3], got [4]"),
        (out(od=torch.int64), "out[2] (scale_offsets): expected dtype torch.int32, got torch.int64"),
        (out(od=torch.uint8), "out[2] (scale_offsets): expected dtype torch.int32, got torch.uint8"),
        (out(s=(300 // 128 * 128 + 128, 8)), f"out[1] (scale): expected shape {list(s_shape)}, got [384, 8]"),
        (out(d=(300, k + 16)), f"out[0] (data): expected shape {list(d_shape)}, got [300, {k + 16}]"),
        (out(sd=torch.float32), f"out[1] (scale): expected dtype torch.{f.scale_dtype} (or torch.uint8)"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=re.escape(msg)):
            quantize_grouped(x, offs, fmt, out=bad)
    o = out()
    with pytest.raises(ValueError, match=re.escape("out[2] (scale_offsets): expected a contiguous tensor")):
        quantize_grouped(x, offs, fmt, out=(o[0], o[1], torch.empty(6, dtype=torch.int32)[::2]))
    with pytest.raises(TypeError, match=re.escape("out[2] (scale_offsets): expected a torch.Tensor, got list")):
        quantize_grouped(x, offs, fmt, out=(o[0], o[1], [0, 0, 0]))


def test_max_groups_matches_the_kernel():
    pytest.importorskip("cutlass")
    from kernelforge.families.quantize_grouped import kernel

    assert kernel.MAX_GROUPS == MAX_GROUPS
    assert 1 << kernel.SEARCH_STEPS == MAX_GROUPS  # the binary search covers every group index


# ---------------------------------------------------------------- torch.library


def test_ops_are_registered():
    for name in ("quantize_experts", "quantize_grouped"):
        op = getattr(torch.ops.kernelforge, name)
        assert all(a.alias_info is None for a in op.default._schema.arguments)


@pytest.mark.parametrize("fmt,mode", COMBOS)
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("shape", [(3, 130, 192), (1, 128, 96), (0, 4, 96), (2, 0, 96)])
def test_fake_experts(fmt, mode, layout, shape):
    f = FORMATS[fmt]
    e, n, k = shape
    with FakeTensorMode():
        d, s = torch.ops.kernelforge.quantize_experts(torch.empty(shape, dtype=torch.bfloat16), fmt, layout, mode, None)
    want = (n, k // f.block) if layout == "linear" else (_roundup(n, 128), _roundup(k // f.block, 4))
    assert (tuple(d.shape), d.dtype) == ((e, n, k * f.element_bits // 8), getattr(torch, f.data_dtype))
    assert (tuple(s.shape), s.dtype) == ((e, *want), getattr(torch, f.scale_dtype))


@pytest.mark.parametrize("fmt,mode", COMBOS)
@pytest.mark.parametrize("t,groups", [(300, 3), (0, 1), (0, 2), (1, 1024), (128, 1)])
def test_fake_grouped(fmt, mode, t, groups):
    f = FORMATS[fmt]
    k = 6 * f.block
    with FakeTensorMode():
        d, s, o = torch.ops.kernelforge.quantize_grouped(torch.empty(t, k, dtype=torch.float16),
                                                         torch.empty(groups, dtype=torch.int32), fmt, mode, None)
    assert (tuple(d.shape), d.dtype) == ((t, k * f.element_bits // 8), getattr(torch, f.data_dtype))
    assert (tuple(s.shape), s.dtype) == ((128 * ((t + 127 * groups) // 128), 8), getattr(torch, f.scale_dtype))
    assert (tuple(o.shape), o.dtype) == ((groups,), torch.int32)


def test_compile_traces_the_grouped_ops_without_graph_breaks():
    def block(w, x, offs, g, d, s, o):
        dw, sw = kernelforge.quantize_experts(w * 2, "nvfp4", global_scale=g)
        dx, sx, ox = kernelforge.quantize_grouped(x, offs, "mxfp8", scale_mode="rceil")
        res = kernelforge.quantize_grouped(x, offs, "mxfp4", out=(d, s, o))
        return dw, sw, dx, sx, ox, *res

    w = torch.randn(4, 130, 256, dtype=torch.bfloat16)
    x = torch.randn(300, 256, dtype=torch.bfloat16)
    offs = _offsets(0, 100, 300)
    out = (torch.empty(300, 128, dtype=torch.uint8), torch.empty(640, 8, dtype=torch.uint8),
           torch.empty(3, dtype=torch.int32))
    graph, res = capture(block, w, x, offs, torch.ones(4), *out)
    targets = [str(n.target) for n in graph.graph.nodes if n.op in ("call_function", "call_method")]
    assert sum("kernelforge.quantize_experts" in t for t in targets) == 1, targets
    assert sum("kernelforge.quantize_grouped" in t for t in targets) == 2, targets
    assert sum("copy_" in t for t in targets) == 3, targets
    assert [tuple(r.shape) for r in res] == [(4, 130, 128), (4, 256, 16), (300, 256), (640, 8), (3,),
                                             (300, 128), (640, 8), (3,)]


def test_the_out_fast_path_accepts_offsets_exactly_as_the_checked_path_would() -> None:
    """`_offsets_fit` (the out= fast path's check of a new group_offsets tensor) agrees with the
    checked path's rules: int32, on the remembered device, contiguous when G > 1, and its bytes
    (`checks.byte_span`) disjoint from every out buffer's; fresh random tensors and spans."""
    from kernelforge.families.quantize_grouped.op import _offsets_fit
    from kernelforge.ops import checks

    gen = torch.Generator().manual_seed(torch.seed())
    for _ in range(300):
        g = int(torch.randint(1, 9, (1,), generator=gen))
        step = int(torch.randint(1, 3, (1,), generator=gen))
        dtype = (torch.int32, torch.int64)[int(torch.randint(0, 2, (1,), generator=gen))]
        base = torch.zeros(g * step + 4, dtype=dtype)
        offs = base[int(torch.randint(0, 4, (1,), generator=gen))::step][:g]
        lo, hi = checks.byte_span(offs)
        spans = tuple((lo + int(a), lo + int(a) + int(n)) for a, n in
                      zip(torch.randint(-40, 40, (2,), generator=gen), torch.randint(1, 16, (2,), generator=gen)))
        expected = (offs.dtype == torch.int32 and (g == 1 or offs.stride(0) == 1)
                    and all(hi <= a or b <= lo for a, b in spans))
        assert _offsets_fit(offs, -1, spans) is expected, (g, step, dtype, spans)
        assert _offsets_fit(offs, 0, ()) is False  # another device than the tensor's
