"""Every cached fused RMSNorm+quantize variant against the unfused reference, on the GPU.

Fresh random inputs each run, poisoned caller buffers, every hidden-size class at and just
past its bounds, M around 128, 3-D inputs, NaN/Inf rows; `residual` must come back holding
dtype(x + residual) bit for bit. The reference runs on the GPU (pure torch, docs/numerics.md).
"""
from __future__ import annotations

import pytest
import torch

import kernelforge
from kernelforge.formats import FORMATS
from kernelforge.ops import fast_path, launch
from kernelforge.testing.checks import op_kwargs
from kernelforge.validation.fused_checks import Tally, compare_fused, reference

pytestmark = pytest.mark.gpu

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
COMBOS = [(f, m) for f in FORMATS for m in FORMATS[f].scale_modes]
M_VALUES = (1, 127, 128, 129)


_kwargs = op_kwargs


def _hidden_sizes(block: int) -> list[int]:
    """Each cached hidden-size class at its bound and one block past it (the next class)."""
    table = launch.dispatch_table()
    coords = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16", "residual": "none"}
    bounds = sorted({c.kclass.max_k for c in table.candidates("rmsnorm_quantize", coords,
                                                               torch.cuda.get_device_capability())})
    assert bounds, "no rmsnorm_quantize kernels in the cache"
    sizes = {block, 256, 1536}
    for b in bounds:
        sizes.add(b)
        if b + block <= bounds[-1]:
            sizes.add(b + block)
    return sorted(sizes)


def _inputs(shape, dtype, with_residual: bool):
    x = torch.randn(shape, device="cuda") * torch.exp2(torch.randint(-6, 6, shape[:-1] + (1,), device="cuda").float())
    r = torch.randn(shape, device="cuda", dtype=dtype) if with_residual else None
    w = (torch.rand(shape[-1], device="cuda") * 2 - 0.5).to(dtype)
    return x.to(dtype), r, w


def run_and_compare(x, r, w, fmt, mode, layout, g, tally, *, eps=1e-6, out=None, finite_rows=None):
    """Run the fused op on (x, r, w), check residual write-back exactly and outputs within tolerance."""
    h_dim = x.shape[-1]
    m = x.numel() // h_dim
    r_before = None if r is None else r.clone()
    kw = _kwargs(mode, layout, g)
    if r is None:
        data, scale = kernelforge.rmsnorm_quantize(x, w, fmt, eps=eps, out=out, **kw)
    else:
        data, scale = kernelforge.add_rmsnorm_quantize(x, r, w, fmt, eps=eps, out=out, **kw)
    h, rd, rs = reference(x, r_before, w, fmt, mode, layout, g, eps)
    what = f"{fmt}/{mode}/{layout}/{x.dtype}/{'add' if r is not None else 'none'} shape {list(x.shape)}"
    if r is not None:
        assert torch.equal(r.view(torch.int16), h.view(torch.int16)), f"{what}: residual != dtype(x + residual)"
    f = FORMATS[fmt]
    assert data.shape == (*x.shape[:-1], h_dim * f.element_bits // 8)
    if finite_rows is None:
        finite_rows = torch.ones(m, dtype=torch.bool, device="cuda")
    compare_fused(data, scale, rd, rs, fmt, layout, m, h_dim, finite_rows, what, tally)
    return data, scale


@pytest.mark.parametrize("residual", ["none", "add"])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_every_variant_over_hidden_classes(fmt, mode, dtype, layout, residual):
    """M in {1, 127, 128, 129} x every hidden-size class bound (and just past it); M = 4096 too."""
    f = FORMATS[fmt]
    tally = Tally()
    g = kernelforge.nvfp4_global_scale(torch.randn(64, device="cuda") * 3) if f.has_global_scale else None
    sizes = _hidden_sizes(f.block)
    shapes = [(m, h) for m in M_VALUES for h in sizes] + [(4096, h) for h in (1536, 4096 + f.block, sizes[-1])]
    for shape in shapes:
        x, r, w = _inputs(shape, DTYPES[dtype], residual == "add")
        run_and_compare(x, r, w, fmt, mode, layout, g, tally)
    tally.check()


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_3d_input_and_poisoned_caller_outputs(fmt, mode, poison):
    f = FORMATS[fmt]
    tally = Tally()
    for residual in (False, True):
        x, r, w = _inputs((3, 43, 2048 + 2 * f.block), torch.bfloat16, residual)
        h = x.shape[-1]
        d_dtype, s_dtype = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
        data = poison(torch.empty(3, 43, h * f.element_bits // 8, dtype=torch.uint8, device="cuda")).view(d_dtype)
        kb = h // f.block
        scale = poison(torch.empty(256, (kb + 3) // 4 * 4, dtype=torch.uint8, device="cuda")).view(s_dtype)
        d2, s2 = run_and_compare(x, r, w, fmt, mode, "swizzled", None, tally, out=(data, scale))
        assert d2 is data and s2 is scale
    tally.check()


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_nan_inf_rows_and_eps(fmt, mode, layout):
    """Rows holding NaN/Inf, zero rows (rstd = 1/sqrt(eps)), tiny and huge rows, several eps."""
    tally = Tally()
    for residual in (False, True):
        x, r, w = _inputs((64, 4096), torch.bfloat16, residual)
        x[0] = 0.0
        x[1, 17] = float("nan")
        x[2, 5] = float("inf")
        x[3, 100] = float("-inf")
        x[4] = 1e-30
        x[5] = x[5] * 1e30
        if r is not None:
            r[0] = 0.0
            r[6, 3] = float("nan")
        hx = x.float() + (r.float() if r is not None else 0)
        finite = torch.isfinite(hx).all(-1)
        for eps in (1e-6, 1e-5, 0.0):
            rr = None if r is None else r.clone()
            run_and_compare(x, rr, w, fmt, mode, layout, None, tally, eps=eps, finite_rows=finite)
    tally.check()


def test_errors_leave_residual_untouched():
    x, r, w = _inputs((8, 512), torch.bfloat16, True)
    before = r.clone()
    bad_calls = [
        lambda: kernelforge.add_rmsnorm_quantize(x, r, w.half(), "mxfp8"),
        lambda: kernelforge.add_rmsnorm_quantize(x, r[:, :256], w, "mxfp8"),
        lambda: kernelforge.add_rmsnorm_quantize(x, x, w, "mxfp8"),
        lambda: kernelforge.add_rmsnorm_quantize(x, r, w, "mxfp8", global_scale=torch.ones(1, device="cuda")),
        lambda: kernelforge.add_rmsnorm_quantize(x, r, w, "nvfp4", out=(torch.empty(8, 256, device="cuda"), None)),
        lambda: kernelforge.add_rmsnorm_quantize(x, r.t(), w, "mxfp8"),
    ]
    for call in bad_calls:
        with pytest.raises((ValueError, TypeError)):
            call()
    torch.cuda.synchronize()
    assert torch.equal(r, before)


def test_hidden_size_beyond_every_class_is_a_value_error():
    from kernelforge.errors import UnsupportedShape

    x = torch.randn(2, 65536, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(65536, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(UnsupportedShape, match="K = 65536") as ei:
        kernelforge.rmsnorm_quantize(x, w, "mxfp8")
    assert isinstance(ei.value, ValueError) and "h32k" in str(ei.value)


def test_m_zero():
    x = torch.empty(0, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    d, s = kernelforge.rmsnorm_quantize(x, w, "nvfp4", layout="swizzled")
    assert d.shape == (0, 512) and s.shape == (0, 64)


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "rceil"), ("nvfp4", "none")])
def test_fast_path_repeats_into_the_same_buffers(fmt, mode, poison, forbid_checked_path):
    """Calls with the same weight and out= buffers skip validation (proved by breaking it) and
    stay within tolerance; a changed eps, weight or buffer goes through the checked path."""
    m, h = 129, 2048
    g = kernelforge.nvfp4_global_scale(torch.randn(64, device="cuda")) if FORMATS[fmt].has_global_scale else None
    x, _, w = _inputs((m, h), torch.bfloat16, False)
    out = kernelforge.rmsnorm_quantize(x, w, fmt, **_kwargs(mode, "swizzled", g))
    n_memo = len(fast_path.fast_calls)
    tally = Tally()
    run_and_compare(x, None, w, fmt, mode, "swizzled", g, tally, out=out)  # checked, then remembered
    with forbid_checked_path():
        for _ in range(3):
            poison(out[0]), poison(out[1])
            x, _, _ = _inputs((m, h), torch.bfloat16, False)
            res = run_and_compare(x, None, w, fmt, mode, "swizzled", g, tally, out=out)
            assert res[0] is out[0] and res[1] is out[1]
    assert len(fast_path.fast_calls) == n_memo + 1
    tally.check()
    with pytest.raises(ValueError, match="eps"):
        kernelforge.rmsnorm_quantize(x, w, fmt, eps=-1.0, out=out, **_kwargs(mode, "swizzled", g))
    with pytest.raises(ValueError, match="weight"):
        kernelforge.rmsnorm_quantize(x, w[:-32], fmt, out=out, **_kwargs(mode, "swizzled", g))
