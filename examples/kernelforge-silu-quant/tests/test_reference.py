"""The reference on the CPU, against independent element-wise computations.

h is checked against silu(g) * u evaluated in float64 with Python's math (rounded once to the
dtype: equal, or one dtype ulp away where the fp32 evaluation sits on the other side of a
rounding boundary), and the quantized bytes against a per-block re-implementation of the
MXFP8 rules with torch's own float8 cast (after saturation) and against dequantization bounds.
"""
from __future__ import annotations

import math

import pytest
import torch
from kf_silu_quant.reference import silu_mul_explicit_ref, silu_mul_quantize_ref, silu_mul_ref, split_gate_up

from kernelforge.testing import dequantize_ref, e4m3_decode, from_swizzled, quantize_ref

DTYPES = (torch.bfloat16, torch.float16)
FLT_MAX = 3.4028234663852886e38


def make_x(m: int, n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, 2 * n, generator=gen) * 3
    x[0, :8] = torch.tensor([0.0, -0.0, 20.0, -20.0, 90.0, -90.0, 1e-3, -1e-3])  # tails of exp
    return x.to(dtype)


def silu64(g: float) -> float:
    """g / (1 + e^-g) in float64, with fp32's overflow of e^-g (g < -88.72...: -0.0)."""
    e = math.exp(-g) if -g < 709 else math.inf
    return g / (1 + (math.inf if e > FLT_MAX else e))


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units of the 16-bit dtype (same-sign values; monotone bit patterns)."""
    ia, ib = a.view(torch.int16).int(), b.view(torch.int16).int()
    return (ia - ib).abs()


@pytest.mark.parametrize("dtype", DTYPES)
def test_h_matches_a_float64_elementwise_silu_mul(dtype):
    x = make_x(64, 256, dtype)
    h = silu_mul_ref(x)
    assert h.dtype == dtype and h.shape == (64, 256)
    g, u = split_gate_up(x)
    exact = [[silu64(gi) * ui for gi, ui in zip(gr, ur)] for gr, ur in zip(g.double().tolist(), u.double().tolist())]
    ind = torch.tensor(exact, dtype=torch.float64).to(dtype)
    assert bool((h.float() * ind.float() >= 0).all())  # same signs (or a zero)
    d = ulp_distance(h.abs(), ind.abs())
    assert int(d.max()) <= 1
    assert float((d == 0).float().mean()) > 0.995
    assert torch.equal(silu_mul_explicit_ref(x).float(), h.float()) or int(
        ulp_distance(silu_mul_explicit_ref(x), h).max()) <= 1


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("mode", ["floor", "rceil"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp8_bytes_match_an_independent_block_quantizer(dtype, mode, layout):
    m, n = 37, 96  # odd M, N = 3 blocks (swizzle pads rows and columns)
    x = make_x(m, n, dtype, seed=1)
    data, scale = silu_mul_quantize_ref(x, "mxfp8", layout=layout, scale_mode=mode)
    assert data.shape == (m, n) and data.dtype == torch.uint8
    if layout == "swizzled":
        assert scale.shape == (128, 4)
        lin = from_swizzled(scale, m, n // 32)
        pad = scale.clone().view(-1)
        idx = torch.tensor([((r // 128) * 4 * 128 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4)
                            for r in range(m) for c in range(n // 32)])
        pad[idx] = 0
        assert int(pad.count_nonzero()) == 0  # every padding byte is zero
    else:
        lin = scale
    assert lin.shape == (m, n // 32)
    h = silu_mul_ref(x).float().view(m, n // 32, 32)
    amax = h.abs().amax(-1)
    for r in range(m):
        for b in range(n // 32):
            a = float(amax[r, b])
            if a == 0:
                s = 0
            elif mode == "floor":
                s = max(min(math.floor(math.log2(a)) - 8, 127), -127) + 127
            else:
                v = torch.tensor(a, dtype=torch.float32) * torch.tensor(1 / 448, dtype=torch.float32)
                s = min(math.ceil(math.log2(float(v))), 127) + 127
            assert int(lin[r, b]) == s, (r, b, a)
            y = (h[r, b] * 2.0 ** (127 - s)).clamp(-448, 448).to(torch.float8_e4m3fn)
            assert torch.equal(data[r, 32 * b:32 * b + 32], y.view(torch.uint8)), (r, b)


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_dequantizes_within_the_format_error(dtype, layout):
    m, n = 33, 64
    x = make_x(m, n, dtype, seed=2)
    h = silu_mul_ref(x)
    g = torch.tensor([448 * 6 / float(h.float().abs().max())], dtype=torch.float32)
    data, scale = silu_mul_quantize_ref(x, "nvfp4", layout=layout, global_scale=g)
    assert data.shape == (m, n // 2)
    assert scale.shape == ((128, 4) if layout == "swizzled" else (m, n // 16))
    want = quantize_ref(h, "nvfp4", layout=layout, global_scale=g)
    assert torch.equal(data, want[0]) and torch.equal(scale, want[1])
    lin = from_swizzled(scale, m, n // 16) if layout == "swizzled" else scale
    deq = dequantize_ref(data, lin, "nvfp4", m=m, k=n, global_scale=g).float()
    hf = h.float()
    blocks = hf.view(m, n // 16, 16)
    sf = e4m3_decode(lin).float() / g  # the block's decode factor
    err = (deq.view(m, n // 16, 16) - blocks).abs()
    # E2M1 rounding is within half a grid step (<= 1 at the top binade [4, 6]) times the factor,
    # plus the factor's own E4M3 rounding (relative 2^-4) on values up to 6.
    assert bool((err <= sf.unsqueeze(-1) * (1.0 + 6 * 2 ** -4) + 1e-30).all())


def test_reference_rejects_bad_inputs():
    with pytest.raises(ValueError, match="x: expected dtype bfloat16 or float16"):
        silu_mul_ref(torch.zeros(2, 64))
    with pytest.raises(ValueError, match="x: expected a last dimension 2N"):
        split_gate_up(torch.zeros(2, 63, dtype=torch.bfloat16))
