"""Bad inputs on the CPU: out buffers (and residual) overlapping an input or each other, the
out= fast path with an input that overlaps remembered buffers, the bytes a NaN / zero /
negative / infinite NVFP4 global scale produces (the reference, which the kernels match), and
calibration of tensors holding Inf or NaN. No GPU and no compiler needed.

Every op checks its arguments before it checks that the input is on CUDA, so each error below
is raised exactly as it would be on a GPU; a call with valid arguments ends at the CUDA check.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

import kernelforge
from kernelforge.families.quantize_columnwise.reference import rht_global_scale_ref
from kernelforge.families.quantize_grouped.reference import quantize_experts_ref, quantize_grouped_ref
from kernelforge.ops import checks, fast_path
from kernelforge.testing.references import (
    FLT_MAX,
    dequantize_ref,
    e2m1_decode,
    nvfp4_global_scale_ref,
    quantize_ref,
    unpack_fp4,
)

CUDA_ONLY = r"^(x|w): expected a CUDA tensor, got a tensor on cpu"
M = K = 64  # x [64, 64] bf16 (8192 bytes); NVFP4 data [64, 32], linear scale [64, 4]


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*(shape or (M, K))).bfloat16()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """t's memory as a flat uint8 tensor (a view: same storage)."""
    return t.view(torch.uint8).reshape(-1)


def _at(buf: torch.Tensor, offset: int, *shape: int) -> torch.Tensor:
    """A contiguous uint8 view of `shape` into buf at byte `offset`."""
    return buf[offset:offset + math.prod(shape)].view(*shape)


def _fresh(*shape: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8)


def _g_in(buf: torch.Tensor, offset: int, n: int = 1) -> torch.Tensor:
    """A float32 [n] global scale living in buf at byte `offset`."""
    return buf[offset:offset + 4 * n].view(torch.float32)


def _raises_overlap(slot: str, other: str):
    return pytest.raises(ValueError, match="^" + re.escape(f"{slot}: must not overlap {other}"))


# ---------------------------------------------------------------- quantize (rowwise)


def _quantize_case(what: str):
    """(x, out, global_scale, slot, other) of an overlapping quantize call (NVFP4, linear)."""
    x = _x()
    buf = _fresh(8192)
    if what == "data in x":
        return x, (_at(_bytes(x), 0, M, 32), _fresh(M, 4)), None, "out[0] (data)", "x"
    if what == "scale in x":
        return x, (_fresh(M, 32), _at(_bytes(x), 4096, M, 4)), None, "out[1] (scale)", "x"
    if what == "scale in data":
        return x, (_at(buf, 0, M, 32), _at(buf, 1024, M, 4)), None, "out[1] (scale)", "out[0] (data)"
    if what == "scale over global_scale":
        return x, (_fresh(M, 32), _at(buf, 0, M, 4)), _g_in(buf, 16), "out[1] (scale)", "global_scale"
    if what == "data over global_scale":
        return x, (_at(buf, 0, M, 32), _fresh(M, 4)), _g_in(buf, 2044), "out[0] (data)", "global_scale"
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["data in x", "scale in x", "scale in data", "scale over global_scale",
                                  "data over global_scale"])
def test_quantize_rejects_overlapping_out(what):
    x, out, g, slot, other = _quantize_case(what)
    before = x.clone()
    with _raises_overlap(slot, other):
        kernelforge.quantize(x, "nvfp4", global_scale=g, out=out)
    assert torch.equal(_bytes(x), _bytes(before))


def test_quantize_rejects_x_that_ends_inside_out():
    buf = _fresh(3 * 8192)
    data, scale = _at(buf, 8192, M, 32), _fresh(M, 4)
    x = _at(buf, 8192 + 2048 - 16 - 8192, 8192).view(torch.bfloat16).view(M, K)  # its last 16 bytes in data
    with _raises_overlap("out[0] (data)", "x"):
        kernelforge.quantize(x, "nvfp4", out=(data, scale))


def test_adjacent_views_of_one_buffer_are_accepted():
    buf = _fresh(16384)
    x = _at(buf, 0, 8192).view(torch.bfloat16).view(M, K)
    out = (_at(buf, 8192, M, 32), _at(buf, 8192 + 2048, M, 4))
    g = _g_in(buf, 8192 + 2048 + 256)
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.quantize(x, "nvfp4", global_scale=g, out=out)


def test_row_strided_x_overlaps_by_its_address_range():
    """A strided x spans from its first to its last element: a buffer in that range is refused."""
    base = torch.randn(2, 2 * K).bfloat16()
    x = base[:, :K]  # rows 256 bytes apart, their first 128 used
    data = _at(_bytes(base), 128, 2, 32)  # in row 0's unused half: between elements of x
    with _raises_overlap("out[0] (data)", "x"):
        kernelforge.quantize(x, "nvfp4", out=(data, _fresh(2, 4)))


# ---------------------------------------------------------------- fused RMSNorm


def _fused_case(slot: str, other: str) -> tuple:
    """(x, residual, weight, global_scale, out) of a fused NVFP4 call where `slot` overlaps `other`."""
    x, res, w, g = _x(), _x(), torch.randn(K).bfloat16(), torch.ones(1)
    out = [_fresh(M, 32), _fresh(M, 4)]
    buf = _fresh(8192)
    if slot == "residual":
        return x, buf.view(torch.bfloat16).view(M, K), w, _g_in(buf, 4000), out
    i = 0 if slot.startswith("out[0]") else 1
    out[i] = _at(buf, 0, *out[i].shape)
    if other == "x":
        x = buf.view(torch.bfloat16).view(M, K)
    elif other == "residual":
        res = buf.view(torch.bfloat16).view(M, K)
    elif other == "weight":
        w = _at(buf, 128, 128).view(torch.bfloat16)
    else:
        g = _g_in(buf, 128)
    return x, res, w, g, out


FUSED_OVERLAPS = [("out[0] (data)", "x"), ("out[0] (data)", "weight"), ("out[1] (scale)", "weight"),
                  ("out[1] (scale)", "global_scale"), ("out[1] (scale)", "residual"), ("residual", "global_scale")]


@pytest.mark.parametrize("op,slot,other", [(op, s, o) for op in ("rmsnorm", "add") for s, o in FUSED_OVERLAPS
                                           if op == "add" or "residual" not in (s, o)])
def test_fused_rejects_overlapping_out_and_residual(op, slot, other):
    x, res, w, g, out = _fused_case(slot, other)
    res_before = res.clone()
    with _raises_overlap(slot, other):
        if op == "rmsnorm":
            kernelforge.rmsnorm_quantize(x, w, "nvfp4", global_scale=g, out=tuple(out))
        else:
            kernelforge.add_rmsnorm_quantize(x, res, w, "nvfp4", global_scale=g, out=tuple(out))
    assert torch.equal(_bytes(res), _bytes(res_before)), "residual was modified by a rejected call"


# ---------------------------------------------------------------- columnwise, dual, RHT


def test_dual_rejects_overlapping_outputs():
    x = _x()
    outs = [_fresh(M, 32), _fresh(M, 4), _fresh(K, 32), _fresh(K, 4)]
    bad = list(outs)
    bad[2] = _at(_bytes(x), 512, K, 32)
    with _raises_overlap("out[2] (data_t)", "x"):
        kernelforge.quantize(x, "nvfp4", columnwise=True, out=tuple(bad))
    bad = list(outs)
    bad[3] = _at(_bytes(bad[0]), 400, K, 4)
    with _raises_overlap("out[3] (scale_t)", "out[0] (data)"):
        kernelforge.quantize(x, "nvfp4", columnwise=True, out=tuple(bad))
    with _raises_overlap("out[0] (data_t)", "x"):
        kernelforge.quantize(x, "nvfp4", rowwise=False, columnwise=True,
                             out=(_at(_bytes(x), 0, K, 32), _fresh(K, 4)))


def test_rht_rejects_out_over_a_global_scale():
    x = _x()
    buf = _fresh(1024)
    out = (_fresh(M, 32), _fresh(128, 4), _fresh(K, 32), _at(buf, 0, 128, 4))
    with _raises_overlap("out[3] (scale_t)", "global_scale_col"):
        kernelforge.quantize_nvfp4_rht(x, global_scale_col=_g_in(buf, 256), out=out)
    out = (_fresh(M, 32), _at(buf, 0, 128, 4), _fresh(K, 32), _fresh(128, 4))
    with _raises_overlap("out[1] (scale)", "global_scale_row"):
        kernelforge.quantize_nvfp4_rht(x, global_scale_row=_g_in(buf, 508), out=out)


# ---------------------------------------------------------------- grouped


def test_experts_reject_overlapping_out():
    w = torch.randn(2, M, K).bfloat16()
    with _raises_overlap("out[0] (data)", "w"):
        kernelforge.quantize_experts(w, "nvfp4", out=(_at(_bytes(w), 4096, 2, M, 32), _fresh(2, 128, 4)))
    buf = _fresh(1024)
    with _raises_overlap("out[1] (scale)", "global_scale"):
        kernelforge.quantize_experts(w, "nvfp4", global_scale=_g_in(buf, 1016, 2),
                                     out=(_fresh(2, M, 32), _at(buf, 0, 2, 128, 4)))


def _grouped_out(buf: torch.Tensor | None = None, where: int = -1) -> list[torch.Tensor]:
    out = [_fresh(M, 32), _fresh(256, 4), torch.empty(2, dtype=torch.int32)]
    if buf is not None:
        out[where] = _at(buf, 0, *out[where].shape) if where < 2 else buf[:8].view(torch.int32)
    return out


@pytest.mark.parametrize("slot,other", [("out[0] (data)", "group_offsets"), ("out[1] (scale)", "global_scale"),
                                        ("out[2] (scale_offsets)", "x"), ("out[2] (scale_offsets)", "group_offsets"),
                                        ("out[1] (scale)", "out[2] (scale_offsets)"), ("out[0] (data)", "x")])
def test_grouped_rejects_overlapping_out(slot, other):
    x = _x()
    buf = _fresh(4096)
    offsets, g = torch.tensor([30, 64], dtype=torch.int32), None
    where = int(slot[4])
    if other == "x":
        out = _grouped_out(_bytes(x), where)
    else:
        out = _grouped_out(buf, where)
        if other == "group_offsets":
            offsets = buf[4:12].view(torch.int32)  # inside out[where]'s first bytes
        elif other == "global_scale":
            g = _g_in(buf, 512)
        else:
            out[2] = buf[64:72].view(torch.int32)
        if other != "global_scale":
            offsets.copy_(torch.tensor([30, 64], dtype=torch.int32))
    with _raises_overlap(slot, other):
        kernelforge.quantize_grouped(x, offsets, "nvfp4", global_scale=g, out=tuple(out))


# ---------------------------------------------------------------- the out= fast path


def _fast_key_quantize(x, d, s, fmt="nvfp4", g=None):
    return fast_path.fast_lookup("quantize", x, (d, s), (fmt, "linear", "floor"), (g,))[1]


@pytest.fixture
def memo(monkeypatch):
    monkeypatch.setattr(fast_path, "fast_calls", {})
    return fast_path.fast_calls


def test_fast_path_refuses_an_x_that_overlaps_remembered_out(memo):
    """x is remembered by layout only: a later x of the same layout lying in an out buffer is
    not served by the memo but rejected by the checked path."""
    buf = _fresh(4 * 8192)
    d, s = _at(buf, 8192, M, 32), _fresh(M, 4)
    calls = []
    x0 = _x()
    fast_path.remember_fast(_fast_key_quantize(x0, d, s), lambda *a: calls.append(a), (d, s, None), None, x0, (d, s))
    kernelforge.quantize(_x(), "nvfp4", out=(d, s))  # elsewhere: served
    assert len(calls) == 1
    for start in (16, 8192 + 1024, 8192 + 2048 - 16):  # ends in, inside, starts in d
        x = _at(buf, start, 8192).view(torch.bfloat16).view(M, K)
        assert checks.overlaps(x, d)
        with _raises_overlap("out[0] (data)", "x"):
            kernelforge.quantize(x, "nvfp4", out=(d, s))
    x = _at(buf, 8192 + 2048, 8192).view(torch.bfloat16).view(M, K)  # right behind d: served
    kernelforge.quantize(x, "nvfp4", out=(d, s))
    assert len(calls) == 2


def test_allocating_fast_path_repeats_only_the_remembered_call(memo):
    """An allocating call like a checked one (same layout, options and global-scale object) is
    served from the memo with fresh outputs of the remembered shapes; a different global scale
    object, or a bad argument, takes the checked path (which explains it)."""
    g = torch.ones(1)
    x0 = _x()
    key = ("quantize", x0.shape, x0.stride(), x0.dtype, x0.get_device(), "nvfp4", "linear", "floor", id(g))
    calls = []
    alloc = ((M, K // 2), (M, K // 16), torch.float4_e2m1fn_x2, torch.float8_e4m3fn, torch.device("cpu"))
    fast_path.remember_fast(key, lambda *a: calls.append(a), (g,), "arg", x0, (), alloc)
    x = _x()
    data, scale = kernelforge.quantize(x, "nvfp4", global_scale=g)
    assert len(calls) == 1 and calls[0][0] is x and calls[0][1] is data and calls[0][3] == "arg"
    assert (data.shape, data.dtype, scale.shape, scale.dtype) == alloc[0:1] + (alloc[2],) + alloc[1:2] + (alloc[3],)
    data2, _ = kernelforge.quantize(_x(), "nvfp4", global_scale=g)
    assert len(calls) == 2 and data2.data_ptr() != data.data_ptr()  # fresh outputs every call
    with pytest.raises(ValueError, match=r"^x: expected a CUDA tensor"):  # another scale: checked path
        kernelforge.quantize(_x(), "nvfp4", global_scale=torch.ones(1))
    with pytest.raises(ValueError, match=r"^format: expected one of"):
        kernelforge.quantize(x, "nvfp5", global_scale=g)
    assert len(calls) == 2


def test_rmsnorm_fast_path_refuses_an_x_that_overlaps_remembered_out(memo):
    buf = _fresh(3 * 8192)
    d, s = _fresh(M, 32), _at(buf, 8192, M, 4)
    w = torch.randn(K).bfloat16()
    x0 = _x()
    key = fast_path.fast_lookup("rmsnorm_quantize", x0, (d, s), ("nvfp4", 1e-6, "linear", "floor"), (w, None))[1]
    calls = []
    fast_path.remember_fast(key, lambda *a: calls.append(a), (d, s, w, None), None, x0, (d, s))
    kernelforge.rmsnorm_quantize(_x(), w, "nvfp4", out=(d, s))
    assert len(calls) == 1
    x = _at(buf, 8192 + 128, 8192).view(torch.bfloat16).view(M, K)
    with _raises_overlap("out[1] (scale)", "x"):
        kernelforge.rmsnorm_quantize(x, w, "nvfp4", out=(d, s))
    assert len(calls) == 1


def test_columnwise_fast_path_refuses_an_x_that_overlaps_remembered_out(memo):
    buf = _fresh(3 * 8192)
    out = (_fresh(K, 32), _at(buf, 8192, K, 4))
    x0 = _x()
    options = ("nvfp4", "linear", "floor", False)
    calls = []
    fast_path.remember_fast(fast_path.fast_lookup("quantize_columnwise", x0, out, options, (None,))[1],
                          lambda *a: calls.append(a), (*out, None), (None, None, False, 0), x0, out)
    kernelforge.quantize(_x(), "nvfp4", rowwise=False, columnwise=True, out=out)
    assert len(calls) == 1
    x = _at(buf, 64, 8192).view(torch.bfloat16).view(M, K)  # its last 64 bytes in out[1]
    with _raises_overlap("out[1] (scale_t)", "x"):
        kernelforge.quantize(x, "nvfp4", rowwise=False, columnwise=True, out=out)
    assert len(calls) == 1


# ---------------------------------------------------------------- global scale arguments


def test_host_global_scales_are_refused_by_name():
    x = _x()
    with pytest.raises(TypeError, match=r"^global_scale: expected a float32 CUDA tensor"):
        kernelforge.quantize(x, "nvfp4", global_scale=float("nan"))
    with pytest.raises(TypeError, match=r"^global_scale_col: expected a float32 CUDA tensor"):
        kernelforge.quantize_nvfp4_rht(x, global_scale_col=1.0)
    with pytest.raises(ValueError, match=r"^global_scale: expected a tensor on meta \(the device of x\), got cpu"):
        kernelforge.quantize(x.to("meta"), "nvfp4", global_scale=torch.ones(1))


# ---------------------------------------------------------------- bad global scales: defined bytes


def _x_for_bad_scales() -> torch.Tensor:
    """Fresh random fp32 rows with |x| >= 2^-20, one all-zero row and one signed-zero row."""
    x = torch.exp2(torch.empty(6, K).uniform_(-20, 20)) * torch.where(torch.rand(6, K) < 0.5, -1.0, 1.0)
    x[2] = 0.0
    x[4] = -0.0
    return x


def _sign(x: torch.Tensor) -> torch.Tensor:
    return (x.view(torch.int32) < 0).to(torch.uint8) << 3


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_nan_global_scale(layout):
    x = _x_for_bad_scales()
    data, scale = quantize_ref(x, "nvfp4", layout=layout, global_scale=torch.tensor([math.nan]))
    nan_bytes = (scale == 0x7F).sum().item()
    assert nan_bytes == 6 * 4 and ((scale == 0x7F) | (scale == 0)).all()  # swizzled padding stays 0
    expect = torch.where(x == 0, 0, 7).to(torch.uint8) | _sign(x)  # E2M1(x * FLT_MAX): saturated, zeros kept
    assert torch.equal(unpack_fp4(data), expect)
    deq = dequantize_ref(data, scale, "nvfp4", m=6, k=K, layout=layout, global_scale=torch.tensor([math.nan]))
    assert deq.isnan().all()


@pytest.mark.parametrize("g,byte", [(0.0, 0x00), (-0.0, 0x80)])
def test_zero_global_scale(g, byte):
    x = _x_for_bad_scales()
    data, scale = quantize_ref(x, "nvfp4", global_scale=torch.tensor([g]))
    assert (scale == byte).all()
    assert torch.equal(unpack_fp4(data), _sign(x))  # every element +-0


@pytest.mark.parametrize("g", [-1.0, -1e-3, -3e5])
def test_negative_global_scale_is_the_positive_one_with_signed_scales(g):
    x = _x_for_bad_scales()
    data, scale = quantize_ref(x, "nvfp4", global_scale=torch.tensor([g]))
    pos_data, pos_scale = quantize_ref(x, "nvfp4", global_scale=torch.tensor([-g]))
    assert torch.equal(scale, pos_scale | 0x80) and torch.equal(data, pos_data)
    deq = dequantize_ref(data, scale, "nvfp4", m=6, k=K, global_scale=torch.tensor([g]))
    pos = dequantize_ref(pos_data, pos_scale, "nvfp4", m=6, k=K, global_scale=torch.tensor([-g]))
    assert torch.equal(deq, pos)


@pytest.mark.parametrize("g,byte", [(math.inf, 0x7E), (-math.inf, 0xFE)])
def test_infinite_global_scale(g, byte):
    x = _x_for_bad_scales()
    data, scale = quantize_ref(x, "nvfp4", global_scale=torch.tensor([g]))
    zero_block = (x.view(6, -1, 16) == 0).all(-1)
    assert torch.equal(scale, torch.where(zero_block, 0x7F, byte).to(torch.uint8))
    assert torch.equal(unpack_fp4(data), torch.where(x == 0, 0, 7).to(torch.uint8) | _sign(x))


def test_tiny_values_under_a_nan_scale_follow_the_factor():
    """Elements are E2M1(x * FLT_MAX): only |x| below about 2^-125 escapes saturation."""
    x = torch.tensor([2.0 ** -125, -(2.0 ** -126), 2.0 ** -128, 2.0 ** -131, 1e-45] + [1.0] * 11)
    data, scale = quantize_ref(x.view(1, 16), "nvfp4", global_scale=torch.tensor([math.nan]))
    got = e2m1_decode(unpack_fp4(data)).view(-1)
    want = torch.clamp(x * FLT_MAX, -6, 6)
    assert scale.item() == 0x7F
    assert got[:2].tolist() == [6.0, -4.0] and got[2].item() == 1.0 and got[4].item() == 0.0
    assert torch.equal(got[5:], want[5:])


def test_non_finite_blocks_keep_the_nan_scale_under_bad_global_scales():
    x = _x_for_bad_scales()
    x[0, 3], x[1, 20] = math.inf, math.nan
    for g in (math.nan, 0.0, -2.0, math.inf):
        _, scale = quantize_ref(x, "nvfp4", global_scale=torch.tensor([g]))
        assert scale[0, 0] == 0x7F and scale[1, 1] == 0x7F


def test_per_group_bad_scales_apply_to_their_group_only():
    w = _x_for_bad_scales()[:4].reshape(2, 2, K)
    g = torch.tensor([math.nan, 2.0])
    data, scale = quantize_experts_ref(w, "nvfp4", layout="linear", global_scale=g)
    assert (scale[0] == 0x7F).all()
    assert torch.equal(data[1], quantize_ref(w[1], "nvfp4", global_scale=g[1:])[0])
    x = _x_for_bad_scales()
    data, scale, starts = quantize_grouped_ref(x, torch.tensor([2, 6], dtype=torch.int32), "nvfp4",
                                               global_scale=torch.tensor([0.0, math.inf]))
    assert starts.tolist() == [0, 128] and (scale[:128] == 0).all()
    assert sorted(scale[128:].unique().tolist()) == [0, 0x7E, 0x7F]
    assert torch.equal(unpack_fp4(data[:2]), _sign(x[:2]))


# ---------------------------------------------------------------- calibration of non-finite tensors


CALIBRATION = [
    ("zeros", lambda: torch.zeros(4, 16), 1.0),
    ("inf", lambda: torch.randn(4, 16).index_put_((torch.tensor([1]), torch.tensor([2])), torch.tensor(math.inf)), 1.0),
    ("-inf", lambda: torch.randn(4, 16).index_put_((torch.tensor([0]), torch.tensor([0])), torch.tensor(-math.inf)), 1.0),
    ("nan", lambda: torch.randn(4, 16).index_put_((torch.tensor([3]), torch.tensor([5])), torch.tensor(math.nan)), 1.0),
    ("tiny", lambda: torch.full((4, 16), 1e-38), FLT_MAX),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("what,make,want", CALIBRATION, ids=[c[0] for c in CALIBRATION])
def test_calibration_is_finite_and_positive(what, make, want, dtype):
    x = make().to(dtype)
    g, ref = kernelforge.nvfp4_global_scale(x), nvfp4_global_scale_ref(x)
    assert g.dtype == torch.float32 and g.shape == (1,)
    assert g.item() == pytest.approx(want, rel=1e-6) and torch.equal(g, ref)


def test_calibration_of_finite_tensors_is_unchanged_and_bitwise_equal_to_the_reference():
    for _ in range(5):
        x = torch.randn(8, 64) * torch.exp2(torch.randint(-30, 30, ()).float())
        g = kernelforge.nvfp4_global_scale(x)
        assert torch.equal(g, nvfp4_global_scale_ref(x))
        assert torch.equal(g, torch.tensor([448.0 * 6.0]) / x.abs().amax())


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_rht_calibration_of_non_finite_input_is_one(bad):
    x = _x()
    x[5, 7] = bad
    assert kernelforge.rht_global_scale(x).item() == 1.0
    assert rht_global_scale_ref(x).item() == 1.0


def test_fast_path_entry_dies_with_any_of_its_tensors(memo):
    """An entry is found by the ids of its persistent tensors, so it must not outlive any of them
    (a new tensor may get a dead one's id): the weak references' callbacks drop it."""
    x0, d, s, g = _x(), _fresh(M, 32), _fresh(M, 4), torch.ones(1)
    key = _fast_key_quantize(x0, d, s, g=g)
    fast_path.remember_fast(key, lambda *a: None, (d, s, g), None, x0, (d, s))
    assert fast_path.fast_hit(key, _x()) is not None
    del g
    assert key not in memo and fast_path.fast_hit(key, _x()) is None
