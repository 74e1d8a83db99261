"""Fused-op argument checks on CPU tensors (no GPU, no compiler): every bad input is a clear
ValueError/TypeError naming the argument, raised before anything is launched (residual is
never touched); a fully valid CPU call ends at the CUDA check.
"""
from __future__ import annotations

import pytest
import torch

import kernelforge
from kernelforge.formats import FORMATS

CUDA_ONLY = r"^x: expected a CUDA tensor, got a tensor on cpu"


def args(fmt="mxfp8", m=4, h=256, dtype=torch.bfloat16, lead=None):
    shape = (*lead, h) if lead else (m, h)
    x = torch.randn(shape).to(dtype)
    return x, torch.randn(shape).to(dtype), torch.randn(h).to(dtype)


def call(op, x, r, w, fmt="mxfp8", **kw):
    if op == "rmsnorm":
        return kernelforge.rmsnorm_quantize(x, w, fmt, **kw)
    return kernelforge.add_rmsnorm_quantize(x, r, w, fmt, **kw)


OPS = ["rmsnorm", "add"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_valid_arguments_reach_the_cuda_check(op, fmt, layout, dtype):
    x, r, w = args(fmt, dtype=dtype, lead=(2, 3))
    with pytest.raises(ValueError, match=CUDA_ONLY):
        call(op, x, r, w, fmt, layout=layout)


BAD = [
    # (what, mutate(x, r, w) -> (x, r, w, kwargs), exception, message regex)
    ("fp32 x", lambda x, r, w: (x.float(), r.float(), w.float(), {}), ValueError, r"^x: expected dtype bfloat16 or float16"),
    ("1-d x", lambda x, r, w: (x[0], r[0], w, {}), ValueError, r"^x: expected a 2-D \[M, H\] or 3-D"),
    ("4-d x", lambda x, r, w: (x.reshape(1, 1, 4, 256), r.reshape(1, 1, 4, 256), w, {}), ValueError, r"^x: expected a 2-D"),
    ("H not a block multiple", lambda x, r, w: (x[:, :40], r[:, :40], w[:40], {}), ValueError, r"^x: H = 40 .* multiple of the mxfp8 block size B = 32"),
    ("x not contiguous", lambda x, r, w: (x.t().contiguous().t(), r, w, {}), ValueError, r"^x: expected a contiguous tensor"),
    ("x misaligned", lambda x, r, w: (torch.randn(4 * 256 + 1).bfloat16()[1:].view(4, 256), r, w, {}), ValueError, r"^x: expected a 16-byte aligned"),
    ("weight dtype", lambda x, r, w: (x, r, w.half(), {}), ValueError, r"^weight: expected dtype torch.bfloat16"),
    ("weight shape", lambda x, r, w: (x, r, w[:128], {}), ValueError, r"^weight: expected shape \[256\]"),
    ("weight 2-d", lambda x, r, w: (x, r, w.view(1, 256), {}), ValueError, r"^weight: expected shape \[256\]"),
    ("weight not a tensor", lambda x, r, w: (x, r, [1.0] * 256, {}), TypeError, r"^weight: expected a torch.Tensor"),
    ("weight strided", lambda x, r, w: (x, r, torch.randn(512).bfloat16()[::2], {}), ValueError, r"^weight: expected a contiguous"),
    ("format", lambda x, r, w: (x, r, w, {"fmt": "fp8"}), ValueError, r"^format: expected one of"),
    ("layout", lambda x, r, w: (x, r, w, {"layout": "tiled"}), ValueError, r"^layout: expected one of"),
    ("scale_mode", lambda x, r, w: (x, r, w, {"scale_mode": "ceil"}), ValueError, r"^scale_mode: expected one of"),
    ("global_scale with MX", lambda x, r, w: (x, r, w, {"global_scale": torch.ones(1)}), ValueError, r"^global_scale: only NVFP4"),
    ("eps type", lambda x, r, w: (x, r, w, {"eps": "1e-6"}), TypeError, r"^eps: expected a float"),
    ("eps negative", lambda x, r, w: (x, r, w, {"eps": -1.0}), ValueError, r"^eps: expected a finite float >= 0"),
    ("eps nan", lambda x, r, w: (x, r, w, {"eps": float("nan")}), ValueError, r"^eps: expected a finite float >= 0"),
    ("out not a pair", lambda x, r, w: (x, r, w, {"out": torch.empty(4, 256)}), TypeError, r"^out: expected a \(data, scale\) tuple"),
    ("out data shape", lambda x, r, w: (x, r, w, {"out": (torch.empty(4, 128, dtype=torch.uint8), torch.empty(4, 8, dtype=torch.uint8))}), ValueError, r"^out\[0\] \(data\): expected shape \[4, 256\]"),
    ("out scale dtype", lambda x, r, w: (x, r, w, {"out": (torch.empty(4, 256, dtype=torch.uint8), torch.empty(4, 8))}), ValueError, r"^out\[1\] \(scale\): expected dtype torch.float8_e8m0fnu"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("what,mutate,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments(op, what, mutate, exc, msg):
    x, r, w = args()
    x, r2, w, kw = mutate(x, r, w)
    r2 = r2 if r2.shape == x.shape else r
    fmt = kw.pop("fmt", "mxfp8")
    before = r2.clone()
    with pytest.raises(exc, match=msg):
        call(op, x, r2, w, fmt, **kw)
    assert torch.equal(r2, before), "residual was modified by a rejected call"


RESIDUAL_BAD = [
    ("None", lambda x, r: None, TypeError, r"^residual: expected a torch.Tensor, got None"),
    ("dtype", lambda x, r: r.half(), ValueError, r"^residual: expected dtype torch.bfloat16"),
    ("shape", lambda x, r: r[:2], ValueError, r"^residual: expected shape \[4, 256\]"),
    ("not contiguous", lambda x, r: r.t().contiguous().t(), ValueError, r"^residual: expected a contiguous"),
    ("is x", lambda x, r: x, ValueError, r"^residual: must not overlap x"),
    ("overlaps x", lambda x, r: None, ValueError, r"^residual: must not overlap x"),
]


@pytest.mark.parametrize("what,make,exc,msg", RESIDUAL_BAD, ids=[b[0] for b in RESIDUAL_BAD])
def test_bad_residual(what, make, exc, msg):
    x, r, w = args()
    if what == "overlaps x":
        buf = torch.randn(8, 256).bfloat16()
        x, res = buf[:4], buf[2:6]  # both 16-byte aligned, rows 2-3 shared
    else:
        res = make(x, r)
    before = None if res is None else res.clone()
    with pytest.raises(exc, match=msg):
        kernelforge.add_rmsnorm_quantize(x, res, w, "nvfp4")
    if before is not None:
        assert torch.equal(res, before)


def test_residual_overlapping_weight():
    buf = torch.randn(5 * 256).bfloat16()
    x = torch.randn(4, 256).bfloat16()
    r, w = buf[:1024].view(4, 256), buf[768:1024]
    with pytest.raises(ValueError, match=r"^residual: must not overlap weight"):
        kernelforge.add_rmsnorm_quantize(x, r, w, "mxfp4")


def test_nvfp4_global_scale_checks():
    x, r, w = args("nvfp4")
    for g, exc, msg in ((torch.ones(1, dtype=torch.float64), ValueError, r"^global_scale: expected dtype torch.float32"),
                        (torch.ones(2), ValueError, r"^global_scale: expected shape \[1\]"),
                        (1.0, TypeError, r"^global_scale: expected a float32 CUDA tensor")):
        with pytest.raises(exc, match=msg):
            kernelforge.rmsnorm_quantize(x, w, "nvfp4", global_scale=g)
    with pytest.raises(ValueError, match=r"^scale_mode: nvfp4 has E4M3 block scales"):
        kernelforge.rmsnorm_quantize(x, w, "nvfp4", scale_mode="rceil")


def test_m_zero_and_3d_shapes_are_checked_before_cuda():
    x, r, w = args(lead=(0, 5))
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.rmsnorm_quantize(x, w, "nvfp4", layout="swizzled")
