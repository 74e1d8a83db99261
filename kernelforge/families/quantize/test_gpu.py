"""Every cached quantize variant against the docs/numerics.md reference, on the GPU.

Inputs are fresh random draws each run; outputs are poisoned before each launch; every byte of
data and scale (padding included) is compared with the reference, bit for bit.
"""
from __future__ import annotations

import pytest
import torch

import kernelforge
from kernelforge.formats import FORMATS
from kernelforge.ops import fast_path, launch
from kernelforge.testing.references import quantize_ref

pytestmark = pytest.mark.gpu

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
COMBOS = [(f, m) for f in FORMATS for m in FORMATS[f].scale_modes]
M_VALUES = (1, 127, 128, 129, 4096)


def _kwargs(fmt: str, mode: str, layout: str) -> dict:
    kw = {"layout": layout}
    if mode != "none":
        kw["scale_mode"] = mode
    return kw


def _random(m: int, k: int, dtype: torch.dtype, device="cuda") -> torch.Tensor:
    # Log-uniform magnitudes over many binades with random signs: exercises every scale.
    mag = torch.exp2(torch.empty(m, k, device=device).uniform_(-12, 12))
    block_gain = torch.exp2(torch.randint(-20, 20, (m, 1), device=device).float())
    sign = torch.where(torch.rand(m, k, device=device) < 0.5, -1.0, 1.0)
    return (mag * sign * block_gain).to(dtype)


def _check(x: torch.Tensor, fmt: str, mode: str, layout: str, g=None, *, out=None, poison=None):
    kw = _kwargs(fmt, mode, layout)
    if g is not None:
        kw["global_scale"] = g
    data, scale = kernelforge.quantize(x, fmt, out=out, **kw)
    torch.cuda.synchronize()
    rd, rs = quantize_ref(x.cpu(), fmt, layout=layout, scale_mode=mode if mode != "none" else "floor",
                          global_scale=None if g is None else g.cpu())
    got_d = data.view(torch.uint8).reshape(rd.shape).cpu()
    got_s = scale.view(torch.uint8).cpu()
    assert got_s.shape == rs.shape
    bad_s = (got_s != rs).nonzero()
    assert bad_s.numel() == 0, f"{fmt}/{mode}/{layout}: {bad_s.shape[0]} scale bytes differ, first at {bad_s[:4].tolist()}"
    # Element bytes of NaN/Inf blocks are unspecified: mask those blocks.
    f = FORMATS[fmt]
    m, k = rd.shape[0], x.shape[-1]
    finite_blocks = torch.isfinite(x.float().cpu().reshape(m, k // f.block, f.block)).all(-1)
    per_block = f.block * f.element_bits // 8
    mask = finite_blocks.repeat_interleave(per_block, dim=1)
    bad_d = ((got_d != rd) & mask).nonzero()
    assert bad_d.numel() == 0, f"{fmt}/{mode}/{layout}: {bad_d.shape[0]} data bytes differ, first at {bad_d[:4].tolist()}"
    return data, scale


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_random_shapes_and_kclasses(fmt, mode, dtype, layout):
    """M boundaries around 128 and a large M; K on both K-classes and their boundaries."""
    B = FORMATS[fmt].block
    g = kernelforge.nvfp4_global_scale(torch.randn(64, device="cuda")) if FORMATS[fmt].has_global_scale else None
    for m in M_VALUES:
        # aligned class: K a multiple of 4 blocks; any class: K = 1, 3, 5 blocks (not multiples of 4)
        for k in ((4 * B, 64 * B, B, 3 * B, 5 * B) if m <= 129 else (32 * B, 3 * B)):
            x = _random(m, k, DTYPES[dtype])
            _check(x, fmt, mode, layout, g)


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_kclass_selection_and_misaligned_views(fmt, mode):
    """A row-strided or misaligned view dispatches to the general class and is still exact."""
    B = FORMATS[fmt].block
    base = _random(130, 8 * B + 8, torch.bfloat16)
    for x in (base[:, : 8 * B], base[:, 8 : 8 * B + 8], base[1:, 8:8 + 4 * B]):
        assert x.stride(-1) == 1
        _check(x, fmt, mode, "swizzled")
    table = launch.dispatch_table()
    coords = {"format": fmt, "scale_mode": mode, "layout": "linear", "dtype": "bfloat16"}
    cap = torch.cuda.get_device_capability()
    _, aligned = table.resolve("quantize", coords, cap, 8 * B, B, 256, 16 * B * 2)
    _, general = table.resolve("quantize", coords, cap, 3 * B, B, 256, 3 * B * 2)
    _, misaligned = table.resolve("quantize", coords, cap, 8 * B, B, 2, 16 * B * 2)
    assert (aligned.kclass.name, general.kclass.name, misaligned.kclass.name) == ("aligned", "any", "any")


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_special_values(fmt, mode, layout):
    """Zeros, tiny, fp32 subnormals, huge, saturating values, ties, NaN and Inf blocks."""
    B = FORMATS[fmt].block
    m, k = 64, 16 * B
    x = _random(m, k, torch.float32)
    x[0] = 0.0
    x[1] = 1e-30 * torch.randn(k, device="cuda")
    x[2] = torch.randn(k, device="cuda") * 1e-42  # fp32 subnormals
    x[3] = torch.randn(k, device="cuda") * 3e38
    x[4, :B] = float("nan")
    x[5, 3] = float("inf")
    x[6, 7] = float("-inf")
    x[7] = torch.tensor([0.25, 0.75, 2.5, 5.0, -0.25, -1e-9] * k, device="cuda")[:k]
    x[8] = -0.0
    x[9, ::2] = 448.0
    for dtype in DTYPES.values():
        xd = x.to(dtype)
        _check(xd, fmt, mode, layout)
        if FORMATS[fmt].has_global_scale:
            for gv in (1e-6, 2688.0 / 3.0, 3e30):
                _check(xd, fmt, mode, layout, torch.tensor([gv], device="cuda"))


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_poisoned_caller_outputs(fmt, mode, poison):
    """Caller-provided buffers (poisoned first) are fully written, padding included."""
    f = FORMATS[fmt]
    m, k = 129, 12 * f.block
    x = _random(m, k, torch.bfloat16)
    d_dtype, s_dtype = getattr(torch, f.data_dtype), getattr(torch, f.scale_dtype)
    data = poison(torch.empty(m, k * f.element_bits // 8, dtype=torch.uint8, device="cuda")).view(d_dtype)
    scale = poison(torch.empty(256, 12, dtype=torch.uint8, device="cuda")).view(s_dtype)
    d2, s2 = _check(x, fmt, mode, "swizzled", out=(data, scale))
    assert d2 is data and s2 is scale


@pytest.mark.parametrize("fmt,mode", COMBOS)
def test_non_default_stream(fmt, mode):
    """Kernels launch on the caller's current stream."""
    f = FORMATS[fmt]
    x = _random(4096, 64 * f.block, torch.bfloat16)
    kernelforge.quantize(x, fmt, **_kwargs(fmt, mode, "linear"))  # loads the module before the timed window
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)  # the kernel must queue behind this on s
        data, scale = kernelforge.quantize(x, fmt, **_kwargs(fmt, mode, "linear"))
        ev = torch.cuda.Event()
        ev.record(s)
    assert not ev.query(), "the stream finished too early to prove ordering"
    ev.synchronize()
    rd, rs = quantize_ref(x.cpu(), fmt, scale_mode=mode if mode != "none" else "floor")
    assert torch.equal(data.view(torch.uint8).cpu(), rd) and torch.equal(scale.view(torch.uint8).cpu(), rs)


def test_m_zero_and_3d():
    x = torch.randn(0, 256, device="cuda", dtype=torch.bfloat16)
    d, s = kernelforge.quantize(x, "mxfp8", layout="swizzled")
    assert d.shape == (0, 256) and s.shape == (0, 8)
    x3 = _random(4, 33 * 4, torch.bfloat16).reshape(2, 2, 132)[:, :, :128]
    d3, s3 = kernelforge.quantize(x3, "nvfp4")
    assert d3.shape == (2, 2, 64) and s3.shape == (4, 8)
    rd, rs = quantize_ref(x3.cpu(), "nvfp4")
    assert torch.equal(d3.view(torch.uint8).reshape(4, 64).cpu(), rd) and torch.equal(s3.view(torch.uint8).cpu(), rs)


def test_global_scale_helper():
    x = torch.randn(1000, device="cuda") * 7
    g = kernelforge.nvfp4_global_scale(x)
    assert g.dtype == torch.float32 and g.shape == (1,)
    assert g.item() == pytest.approx(448 * 6 / x.abs().max().item(), rel=1e-6)
    assert kernelforge.nvfp4_global_scale(torch.zeros(8, device="cuda")).item() == 1.0


@pytest.mark.parametrize("fmt,mode", [("mxfp8", "floor"), ("mxfp4", "rceil"), ("nvfp4", "none")])
def test_fast_path_repeats_into_the_same_buffers(fmt, mode, poison, forbid_checked_path):
    """Calls into the same out= buffers skip validation (proved by breaking it) and stay exact;
    a misaligned input of the same shape, or other buffers, go through the checked path."""
    B = FORMATS[fmt].block
    m, k = 129, 16 * B
    g = kernelforge.nvfp4_global_scale(torch.randn(64, device="cuda")) if FORMATS[fmt].has_global_scale else None
    out = kernelforge.quantize(_random(m, k, torch.bfloat16), fmt, global_scale=g, **_kwargs(fmt, mode, "swizzled"))
    n_memo = len(fast_path.fast_calls)
    _check(_random(m, k, torch.bfloat16), fmt, mode, "swizzled", g, out=out)  # checked, then remembered
    with forbid_checked_path():
        for _ in range(3):
            poison(out[0]), poison(out[1])
            res = _check(_random(m, k, torch.bfloat16), fmt, mode, "swizzled", g, out=out)
            assert res[0] is out[0] and res[1] is out[1]
    assert len(fast_path.fast_calls) == n_memo + 1
    # Same shape and strides but a 2-byte offset: the aligned kernel's own check refuses it and
    # the checked path picks the K-class that accepts it; the result is still exact.
    base = _random(1, m * k + 1, torch.bfloat16).view(-1)
    x = base[1:].view(m, k)
    assert x.data_ptr() % 16
    poison(out[0]), poison(out[1])
    _check(x, fmt, mode, "swizzled", g, out=out)
    # Another buffer object of the wrong shape is validated, not taken on trust.
    with pytest.raises(ValueError, match=r"out\[0\]"):
        kernelforge.quantize(x.contiguous(), fmt, global_scale=g, out=(out[0][:-1], out[1]), **_kwargs(fmt, mode, "swizzled"))


BAD_G = [float("nan"), 0.0, -0.0, -1.5, float("inf"), float("-inf"), 1e-40, 3e38]


@pytest.mark.parametrize("g", BAD_G, ids=[repr(g) for g in BAD_G])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_nvfp4_bad_global_scales_give_the_reference_bytes(g, layout):
    """A NaN / zero / negative / infinite / extreme g is not rejected (no host read), and the
    kernels produce the defined bytes of docs/numerics.md (NVFP4 section), as the reference does."""
    B = FORMATS["nvfp4"].block
    gt = torch.tensor([g], device="cuda")
    for dtype in DTYPES.values():
        for m, k in ((129, 4 * B), (64, 3 * B)):  # both K-classes
            x = _random(m, k, dtype)
            x[5], x[7] = 0.0, -0.0  # 0 * Inf scales, signed zeros
            _check(x, "nvfp4", "none", layout, gt)
