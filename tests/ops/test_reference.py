"""CPU tests of the reference quantizers (kernelforge.ops.reference) against docs/numerics.md.

Expected bytes below are worked by hand from the contract; the encoders are also checked
against slow scalar versions (exact rationals, nearest grid value, ties to the even code).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from fractions import Fraction

import numpy as np
import pytest
import torch

from kernelforge.families.rmsnorm_quantize import reference as rmsnorm_reference
from kernelforge.formats import get_format
from kernelforge.testing import references as R

F32 = torch.float32
FLT_MAX = float(np.finfo(np.float32).max)


def f32(*vals: float) -> torch.Tensor:
    return torch.tensor(vals, dtype=F32)


def block_row(*blocks: list[float], b: int) -> torch.Tensor:
    """One fp32 row made of blocks; a short block is padded by repeating its last value."""
    row = []
    for blk in blocks:
        row += list(blk) + [blk[-1]] * (b - len(blk))
    return torch.tensor([row], dtype=F32)


# --------------------------------------------------------------------------- slow encoders
def _e4m3_grid() -> list[Fraction]:
    out = []
    for code in range(0x7F):  # 0x7F is NaN
        e, m = code >> 3, code & 7
        out.append(Fraction(m, 8) * Fraction(1, 64) if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7))
    return out


E4M3_GRID = _e4m3_grid()
E2M1_GRID = [Fraction(v) for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)]


def slow_encode(v: float, grid: list[Fraction], sign_bit: int, nan_code: int) -> int:
    """Nearest grid value, ties to even code, satfinite, sign kept for zero."""
    if math.isnan(v):
        return nan_code
    sign = (math.copysign(1.0, v) < 0) << sign_bit
    a = abs(v)
    if a >= grid[-1]:
        return (len(grid) - 1) | sign
    x = Fraction(a)
    i = bisect_right(grid, x) - 1
    d = (x - grid[i]) - (grid[i + 1] - x)
    idx = i if d < 0 or (d == 0 and i % 2 == 0) else i + 1
    return idx | sign


def _fp32_neighbours(vals: list[float]) -> list[float]:
    v = np.array(vals, dtype=np.float32)
    return list(np.concatenate([v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]))


def _encoder_inputs(grid: list[Fraction], sub_top: float) -> torch.Tensor:
    bf16_all = (torch.arange(65536, dtype=torch.int32) << 16).view(F32)
    mids = [float((a + b) / 2) for a, b in zip(grid, grid[1:])]
    special = _fp32_neighbours(mids + [float(g) for g in grid] + [0.0, 2.0**-149, 1.5 * float(grid[-1])])
    extra = torch.tensor(special, dtype=F32)
    sub = torch.rand(4000) * sub_top  # the encoder's subnormal range, dense
    fp32_sub = torch.randint(1, 1 << 23, (1000,), dtype=torch.int32).view(F32)
    rand_bits = torch.randint(-(2**31), 2**31 - 1, (4000,), dtype=torch.int32).view(F32)
    small = torch.randn(4000) * 4 * float(grid[-1]) / 6
    pos = torch.cat([extra, sub, fp32_sub, small])
    return torch.cat([bf16_all, pos, -pos, rand_bits])


@pytest.mark.parametrize("name", ["e4m3", "e2m1"])
def test_encoder_matches_slow_scalar(name: str) -> None:
    grid, sign_bit, nan_code, enc = (
        (E4M3_GRID, 7, 0x7F, R.e4m3_encode) if name == "e4m3" else (E2M1_GRID, 3, 0x7, R.e2m1_encode)
    )
    v = _encoder_inputs(grid, 2.0**-6 if name == "e4m3" else 1.0)
    got = enc(v).tolist()
    want = [slow_encode(x, grid, sign_bit, nan_code) for x in v.tolist()]
    bad = [(x, g, w) for x, g, w in zip(v.tolist(), got, want) if g != w]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:5]}"


def test_encoder_hand_values() -> None:
    v = f32(0.0, -0.0, 1.0, 448.0, 464.0, 1e30, math.inf, -math.inf, 17.0, 19.0,
            2.0**-10, -(2.0**-10), 3 * 2.0**-10, 2.0**-9, 2.0**-140, math.nan)
    assert R.e4m3_encode(v).tolist() == [0x00, 0x80, 0x38, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x58, 0x5A,
                                         0x00, 0x80, 0x02, 0x01, 0x00, 0x7F]
    v = f32(0.25, -0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 6.5, -7.0, math.inf, -0.0, 0.3, math.nan)
    assert R.e2m1_encode(v).tolist() == [0, 8, 2, 2, 4, 4, 6, 6, 14, 7, 15, 7, 8, 1, 7]


def test_decoders_invert_encoders() -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    finite = (codes & 0x7F) != 0x7F
    assert torch.equal(R.e4m3_encode(R.e4m3_decode(codes))[finite], codes[finite])
    assert torch.isnan(R.e4m3_decode(codes)[~finite]).all()
    c4 = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(R.e2m1_encode(R.e2m1_decode(c4)), c4)


def test_pack_unpack_fp4() -> None:
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x8]], dtype=torch.uint8)
    assert R.pack_fp4(codes).tolist() == [[0x21, 0x8F]]
    rnd = torch.randint(0, 16, (5, 64), dtype=torch.uint8)
    assert torch.equal(R.unpack_fp4(R.pack_fp4(rnd)), rnd)


# --------------------------------------------------------------------------- scales
def test_exp2_fp32_exact() -> None:
    e = torch.tensor([-149, -127, -126, 0, 127], dtype=torch.int32)
    got = R.exp2_fp32(e)
    assert got.view(torch.int32).tolist() == [1, 1 << 22, 1 << 23, 127 << 23, 254 << 23]
    assert got.double().tolist() == [2.0**-149, 2.0**-127, 2.0**-126, 1.0, 2.0**127]


def test_floor_log2_subnormals() -> None:
    a = f32(2.0**-149, 3 * 2.0**-149, 2.0**-127, 1.5 * 2.0**-127, 2.0**-126, 1.0, 448.0, FLT_MAX)
    assert R._floor_log2(a).tolist() == [-149, -148, -127, -127, -126, 0, 8, 127]


def test_ue8m0_floor() -> None:
    fp8, fp4 = get_format("mxfp8"), get_format("mxfp4")
    a = f32(1.0, 448.0, 449.0, 256.0, 0.0, 2.0**-130, 2.0**-120, FLT_MAX, math.nan, math.inf)
    assert R.ue8m0_scale(a, fp8, "floor").tolist() == [119, 127, 127, 127, 0, 0, 0, 246, 255, 255]
    a = f32(6.0, 4.0, 7.99, 8.0, 0.5, FLT_MAX)
    assert R.ue8m0_scale(a, fp4, "floor").tolist() == [127, 127, 127, 128, 124, 252]


def test_ue8m0_rceil() -> None:
    # 448 * fp32(1/448) and 6 * fp32(1/6) both round to exactly 1.0 in fp32 (the constant's
    # error is 3*2^-26 and 2^-25 relative, below half an ulp of 1), so these stay at 127.
    a = f32(448.0, 449.0, 1.0, 1.875, 256.0, 0.0, 2.0**-118, 2.0**-119, FLT_MAX, -math.nan, -math.inf)
    assert R.ue8m0_scale(a, "mxfp8", "rceil").tolist() == [127, 128, 119, 120, 127, 0, 1, 0, 247, 255, 255]
    # amax = 6 * 2^-127 = 1.5 * 2^-125 makes t = 2^-127 (1 + 2^-25) -> exactly 2^-127, the fp32
    # subnormal 2^22 * 2^-149: not above, so 0. One fp32 step up (2^-148) adds 0.46 of the
    # subnormal ulp 2^-149 to t and still rounds to 2^-127 (0); two steps add 0.79 and round to
    # 2^-127 + 2^-149: above, so 1 (2^-126).
    edge = np.float32(6 * 2.0**-127)
    up1 = np.nextafter(edge, np.float32(1))
    up2 = np.nextafter(up1, np.float32(1))
    a = f32(6.0, 6.5, 4.0, 7.0, float(edge), float(up1), float(up2), FLT_MAX)
    assert R.ue8m0_scale(a, "mxfp4", "rceil").tolist() == [127, 128, 127, 128, 0, 0, 1, 253]


def test_ue8m0_decode() -> None:
    s = torch.tensor([0, 1, 127, 254, 255], dtype=torch.uint8)
    d = R.ue8m0_decode(s)
    assert d[:4].double().tolist() == [2.0**-127, 2.0**-126, 1.0, 2.0**127]
    assert math.isnan(d[4].item())


# --------------------------------------------------------------------------- MX quantize
def test_mxfp8_floor_hand() -> None:
    x = block_row(
        [1.0, 0.5, -1.0, 0.25],                       # amax 1: s = 0-8+127 = 119, x*2^8
        [448.0, -448.0, 17.0, 19.0, 2.0**-10, -(2.0**-10), 3 * 2.0**-10, 2.0**-9, 1.0],  # s = 127
        [1.875, 1.0],                                 # s = 119: 480 saturates to 448
        [0.0, -0.0],                                  # amax 0: s = 0, x*2^127 = +-0
        [2.0**-130, -(2.0**-149), 2.0**-136],         # fp32 subnormal: s = 0, x*2^127
        [2.0**-120, 2.0**-121],                       # -128 clamps to -127: s = 0
        [1.5 * 2.0**127, 1.0],                        # s = 127-8+127 = 246, x*2^-119
        [math.nan, 1.0],
        [1.0, -math.inf],
        b=32,
    )
    data, scale = R.quantize_ref(x, "mxfp8")
    assert scale.tolist() == [[119, 127, 119, 0, 0, 0, 246, 255, 255]]
    d = data.view(9, 32)
    assert d[0, :4].tolist() == [0x78, 0x70, 0xF8, 0x68] and (d[0, 4:] == 0x68).all()
    assert d[1, :9].tolist() == [0x7E, 0xFE, 0x58, 0x5A, 0x00, 0x80, 0x02, 0x01, 0x38]
    assert d[2, :2].tolist() == [0x7E, 0x78]
    assert d[3, :2].tolist() == [0x00, 0x80]
    assert d[4, :3].tolist() == [0x20, 0x80, 0x01]  # 2^-3, -2^-22 -> -0, 2^-9
    assert d[5, :2].tolist() == [0x70, 0x68]         # 2^7, 2^6
    assert d[6, :2].tolist() == [0x7C, 0x00]         # 384; 2^-119 underflows E4M3 -> 0
    assert (d[7:] == 0x7F).all()                     # documented NaN-block element bytes


def test_mxfp8_rceil_hand() -> None:
    x = block_row([1.875, -1.0], [449.0, 3.0], [448.0, 1.0], [0.0, 1.0], b=32)
    data, scale = R.quantize_ref(x, "mxfp8", scale_mode="rceil")
    assert scale.tolist() == [[120, 128, 127, 119]]
    d = data.view(4, 32)
    # 1.875*2^7 = 240 (0x77), -128 (0xF0); 449/2 = 224.5 -> 224 (0x76), 1.5 (0x3C)
    assert d[0, :2].tolist() == [0x77, 0xF0] and d[1, :2].tolist() == [0x76, 0x3C]
    assert d[2, :2].tolist() == [0x7E, 0x38] and d[3, :2].tolist() == [0x00, 0x78]


def test_mxfp4_hand() -> None:
    vals = [6.0, -6.0, 0.25, -0.25, 0.75, 1.25, 2.5, 3.5, 5.0, -5.0, 1.75, 0.5, 1.0]
    x = block_row(vals, [7.0, -1.0], [6.5, 3.0], b=32)
    data, scale = R.quantize_ref(x, "mxfp4")
    assert scale.tolist() == [[127, 127, 127]]
    row = data.view(3, 16)
    assert row[0].tolist() == [0xF7, 0x80, 0x22, 0x64, 0xE6, 0x14] + [0x22] * 10
    assert row[1, 0].item() == 0xA7 and row[2, 0].item() == 0x57  # 7 -> 6 (sat), -1; 6.5 -> 6, 3
    data, scale = R.quantize_ref(x, "mxfp4", scale_mode="rceil")
    assert scale.tolist() == [[127, 128, 128]]
    # 7/2 = 3.5 ties to 4 (code 6), -0.5 (code 9); 3.25 -> 3 (5), 1.5 (3)
    assert data.view(3, 16)[1, 0].item() == 0x96 and data.view(3, 16)[2, 0].item() == 0x35


# --------------------------------------------------------------------------- NVFP4
def test_nvfp4_default_scale_hand() -> None:
    x = block_row([6.0, -3.0, 0.25], [12.0, 5.0, -1.0], [2688.0, 1.0], [3000.0, 0.0],
                  [2.0**-12, -(2.0**-12), -0.0], [math.nan, 1.0], [math.inf, 1.0], b=16)
    data, scale = R.quantize_ref(x, "nvfp4")
    # sf = E4M3(amax * fp32(1/6)): 1, 2, 448, 500 -> 448, ~2^-14.6 -> 0 (enc 0), NaN, Inf
    assert scale.tolist() == [[0x38, 0x40, 0x7E, 0x7E, 0x00, 0x7F, 0x7F]]
    c = R.unpack_fp4(data).view(7, 16)
    assert c[0, :3].tolist() == [7, 13, 0]
    assert c[1, :3].tolist() == [7, 4, 9]        # 6, 2.5 -> 2 (tie, even), -0.5
    assert c[2, :2].tolist() == [7, 0]           # 2688 * fp32(1/448) = 6 + 2^-21 -> 6
    assert c[3, :2].tolist() == [7, 0]           # 3000/448 = 6.7 saturates
    assert c[4, :3].tolist() == [0, 8, 8]        # x * 0: negatives keep the sign
    assert (c[5:] == 7).all()


def test_nvfp4_global_scale_hand() -> None:
    # g = 3: sf = E4M3(1 * fp32(3 * fp32(1/6))) = 0.5 (0x30); enc = 1/(0.5 * fp32(1/3)) = 6.
    x = block_row([1.0, -0.5, 0.25, 0.125, 0.0625], b=16)
    data, scale = R.quantize_ref(x, "nvfp4", global_scale=f32(3.0))
    assert scale.tolist() == [[0x30]]
    assert R.unpack_fp4(data)[0, :5].tolist() == [7, 13, 3, 2, 1]  # 6, -3, 1.5, 0.75->1, 0.375->0.5


def test_nvfp4_enc_clamped_to_flt_max() -> None:
    # g = 2^127, amax = 1.5*2^-134 (fp32 subnormal): sf = 2^-9 (0x01), sf*(1/g) = 2^-136, whose
    # reciprocal overflows; enc = FLT_MAX (not Inf), so 0 stays 0 rather than NaN.
    x = block_row([1.5 * 2.0**-134, -(2.0**-149), 0.0], b=16)
    data, scale = R.quantize_ref(x, "nvfp4", global_scale=f32(2.0**127))
    assert scale.tolist() == [[0x01]]
    assert R.unpack_fp4(data)[0, :3].tolist() == [0, 8, 0]
    assert (R.unpack_fp4(data)[0, 3:] == 0).all()


def test_nvfp4_global_scale_ref() -> None:
    assert R.nvfp4_global_scale_ref(f32(1.0, -10.0, 3.0)).tolist() == [float(np.float32(2688) / np.float32(10))]
    assert R.nvfp4_global_scale_ref(torch.zeros(4, 16)).tolist() == [1.0]
    g = R.nvfp4_global_scale_ref(torch.randn(8, 32, dtype=torch.bfloat16))
    assert g.shape == (1,) and g.dtype == F32


# --------------------------------------------------------------------------- layouts
def test_swizzle_offset_hand() -> None:
    assert [R.swizzle_offset(m, k, 4) for m, k in [(0, 0), (1, 0), (32, 0), (33, 3), (128, 0)]] == [0, 16, 4, 23, 512]
    assert R.swizzle_offset(5, 6, 8) == 512 + 80 + 2
    assert R.swizzle_offset(200, 5, 8) == 1024 + 512 + 128 + 8 + 1


def test_to_swizzled_padding_and_inverse() -> None:
    s = torch.randint(1, 256, (3, 2), dtype=torch.uint8)
    sw = R.to_swizzled(s)
    assert sw.shape == (128, 4)
    flat = sw.flatten()
    pos = {0: s[0, 0], 1: s[0, 1], 16: s[1, 0], 17: s[1, 1], 32: s[2, 0], 33: s[2, 1]}
    for off, val in pos.items():
        assert flat[off] == val
    mask = torch.ones_like(flat, dtype=torch.bool)
    mask[list(pos)] = False
    assert (flat[mask] == 0).all()
    for m, c in [(130, 5), (256, 8), (1, 1)]:
        s = torch.randint(1, 256, (m, c), dtype=torch.uint8)
        sw = R.to_swizzled(s)
        mp, np_ = sw.shape
        padded = torch.zeros(mp, np_, dtype=torch.uint8)
        padded[:m, :c] = s
        # Independent construction: m = 128*b + 32*i + j, k = 4*kb + kk -> order (b, kb, j, i, kk).
        alt = padded.view(mp // 128, 4, 32, np_ // 4, 4).permute(0, 3, 2, 1, 4).reshape(mp, np_)
        assert torch.equal(sw, alt)
        assert torch.equal(R.from_swizzled(sw, m, c), s)


# --------------------------------------------------------------------------- API behaviour
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_shapes_empty_and_leading_dims(fmt: str) -> None:
    f = get_format(fmt)
    data, scale = R.quantize_ref(torch.empty(0, 64, dtype=torch.bfloat16), fmt)
    assert data.shape == (0, f.data_cols(64)) and scale.shape == (0, 64 // f.block)
    data, scale = R.quantize_ref(torch.empty(0, 64), fmt, layout="swizzled")
    assert data.shape[0] == 0 and scale.shape == (0, 4)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    data, scale = R.quantize_ref(x, fmt, layout="swizzled")
    assert data.shape == (6, f.data_cols(64)) and scale.shape == (128, 4)
    lin = R.quantize_ref(x, fmt)[1]
    assert torch.equal(scale, R.to_swizzled(lin)) and data.dtype == scale.dtype == torch.uint8


@pytest.mark.parametrize("fmt,k", [("mxfp8", 48), ("mxfp4", 16), ("nvfp4", 24)])
def test_k_not_multiple_of_block(fmt: str, k: int) -> None:
    b = get_format(fmt).block
    with pytest.raises(ValueError, match=rf"K={k}.*B={b}"):
        R.quantize_ref(torch.randn(4, k), fmt)


def test_bad_arguments() -> None:
    x = torch.randn(2, 32)
    for kwargs in ({"layout": "tiled"}, {"scale_mode": "none"}):
        with pytest.raises(ValueError):
            R.quantize_ref(x, "mxfp8", **kwargs)
    with pytest.raises(ValueError):
        R.quantize_ref(x, "fp8")
    with pytest.raises(ValueError):
        R.quantize_ref(x.to(torch.int32), "mxfp8")


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "nvfp4"])
def test_input_dtypes_agree(fmt: str) -> None:
    x = torch.randn(8, 64, dtype=torch.bfloat16) * 3
    ref = R.quantize_ref(x, fmt)
    for dt in (torch.float32, torch.float16):
        got = R.quantize_ref(x.to(dt), fmt)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


# --------------------------------------------------------------------------- round trip
def _random_input(m: int, k: int, row_range: int) -> torch.Tensor:
    mag = torch.exp2(torch.randint(-row_range, row_range, (m, 1)).float())
    x = torch.randn(m, k) * mag * torch.exp2(torch.randint(-6, 3, (m, k)).float())
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "floor"), ("mxfp8", "rceil"), ("mxfp4", "floor"),
                                      ("mxfp4", "rceil"), ("nvfp4", "none")])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_round_trip_error_bounds(fmt: str, mode: str, layout: str) -> None:
    f = get_format(fmt)
    m, k = 77, 256
    # MX scales span 2^+-127 per block; NVFP4 blocks share one g, so keep its rows within the
    # E4M3 scale range (2^-9 .. 448) of each other.
    x = _random_input(m, k, 4 if f.has_global_scale else 20)
    g = R.nvfp4_global_scale_ref(x) if f.has_global_scale else None
    data, scale = R.quantize_ref(x, fmt, layout=layout, scale_mode=mode, global_scale=g)
    deq = R.dequantize_ref(data, scale, fmt, m=m, k=k, layout=layout, global_scale=g)
    xb = x.float().view(m, k // f.block, f.block)
    db = deq.view_as(xb)
    lin = R.from_swizzled(scale, m, k // f.block) if layout == "swizzled" else scale
    q = (R.e4m3_decode(data) if f.element == "e4m3" else R.e2m1_decode(R.unpack_fp4(data))).view_as(xb)
    if f.has_global_scale:
        sf = R.e4m3_decode(lin).unsqueeze(-1)
        assert torch.equal(db, q * sf / g)
        unit = sf / g  # one element step; y below is x * enc up to fp32 rounding
    else:
        unit = R.ue8m0_decode(lin).unsqueeze(-1)
        assert torch.equal(db, q * unit)
    assert (unit > 0).all()
    y = xb / unit  # the scaled element (exact for MX)
    rel, half_sub = (2.0**-4, 2.0**-10) if f.element == "e4m3" else (2.0**-2, 0.25)
    sat = y.abs() > f.maxv * (1 + 1e-5)
    tol = torch.maximum(rel * y.abs(), torch.full_like(y, half_sub)) * (1 + 1e-5)
    assert ((q - y).abs() <= tol)[~sat].all()
    assert (q.abs() == f.maxv)[sat].all() and (torch.sign(q) == torch.sign(y))[sat].all()
    # Per block: the largest element lands where the mode puts it, and the error is bounded.
    ymax = y.abs().amax(-1)
    if mode == "floor":
        assert ((ymax >= 2.0**f.emax) & (ymax < 2.0 ** (f.emax + 1))).all()
    elif mode == "rceil":
        assert ((ymax > f.maxv / 2 * (1 - 1e-6)) & (ymax <= f.maxv * (1 + 1e-6))).all()
    block_rel = {"mxfp8": 1 / 8, "mxfp4": 1 / 4, "nvfp4": 1 / 4}[fmt]
    amax = xb.abs().amax(-1, keepdim=True)
    assert ((db - xb).abs() <= block_rel * amax * (1 + 1e-5)).all()


# --------------------------------------------------------------------------- rmsnorm
def test_rmsnorm_ref() -> None:
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.bfloat16)
    y = rmsnorm_reference.rmsnorm_ref(x, w)
    xd = x.double()
    want = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert y.dtype == x.dtype and torch.allclose(y.double(), want, rtol=1e-2, atol=1e-3)
    h, y2 = rmsnorm_reference.add_rmsnorm_ref(x, x, w)
    assert torch.equal(h, x * 2) and torch.equal(y2, rmsnorm_reference.rmsnorm_ref(h, w))
