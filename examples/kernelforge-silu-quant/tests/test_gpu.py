"""GPU: the kernel against the reference computed on the same GPU with torch ops, bit for bit.

Every format / scale mode, layout and dtype, odd and even M, several N (aligned and `any`
K-classes), fresh random inputs with the tails of exp, caller output buffers poisoned with 0xAB
(so every byte the op must write, swizzle padding included, is checked), a strided x, a
misaligned x and leading dimensions. Needs a CUDA GPU and a cache holding the example's
variants ($KERNELFORGE_CACHE_DIR, or what kernelforge resolves by default); skipped otherwise.
"""
from __future__ import annotations

import pytest
import torch
from kf_silu_quant.reference import silu_mul_explicit_ref, silu_mul_quantize_ref, silu_mul_ref

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

CASES = [("mxfp8", "floor"), ("mxfp8", "rceil"), ("nvfp4", "none")]
DTYPES = [torch.bfloat16, torch.float16]
# (M, N): odd M, M = 1, more than 128 rows; N with 4k blocks (aligned K-class) and without (any)
SHAPES = [(1, 64), (37, 96), (129, 2048), (300, 7168), (257, 14336), (64, 4128)]
POISON = 0xAB


@pytest.fixture(scope="module", autouse=True)
def registered():
    from kf_silu_quant.family import ensure_registered

    ensure_registered()


def make_x(m: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, 2 * n, device="cuda", generator=gen) * 3
    tails = torch.tensor([0.0, -0.0, 20.0, -20.0, 88.0, -88.0, 90.0, -90.0, 1e-3, -1e-3, 7.5, -7.5], device="cuda")
    x[m // 2, : tails.numel()] = tails  # exp's range reduction, overflow and underflow paths
    x[m - 1, n: n + tails.numel()] = tails.flip(0)
    return x.to(dtype)


def poisoned(shape, device="cuda") -> torch.Tensor:
    return torch.full(shape, POISON, dtype=torch.uint8, device=device)


def expected_shapes(fmt: str, lead: tuple, m: int, n: int, layout: str) -> tuple[tuple, tuple]:
    b, bits = (32, 8) if fmt == "mxfp8" else (16, 4)
    kb = n // b
    s = (m, kb) if layout == "linear" else (-(-m // 128) * 128, -(-kb // 4) * 4)
    return (*lead, n * bits // 8), s


def check(x: torch.Tensor, fmt: str, mode: str, layout: str, g: torch.Tensor | None, what: str) -> None:
    from kf_silu_quant.ops import silu_mul_quantize

    n = x.shape[-1] // 2
    m = x.numel() // x.shape[-1] if x.shape[-1] else 0
    d_shape, s_shape = expected_shapes(fmt, tuple(x.shape[:-1]), m, n, layout)
    data, scale = poisoned(d_shape), poisoned(s_shape)
    kw = {"layout": layout, "global_scale": g, **({"scale_mode": mode} if mode != "none" else {})}
    got = silu_mul_quantize(x, fmt, out=(data, scale), **kw)
    assert got[0] is data and got[1] is scale
    torch.cuda.synchronize()
    want_d, want_s = silu_mul_quantize_ref(x, fmt, layout=layout, scale_mode=mode, global_scale=g)
    want_d = want_d.view(d_shape)
    d_bad = int((data != want_d).sum())
    s_bad = int((scale != want_s).sum())
    if d_bad or s_bad:
        alt_d, alt_s = silu_mul_quantize_ref(x, fmt, layout=layout, scale_mode=mode, global_scale=g,
                                             activation=silu_mul_explicit_ref)
        explicit = torch.equal(alt_d.view(d_shape), data) and torch.equal(alt_s, scale)
        h_diff = int((silu_mul_ref(x) != silu_mul_explicit_ref(x)).sum())
        idx = (data != want_d).nonzero()[:3].tolist()
        pytest.fail(f"{what}: {d_bad} data bytes and {s_bad} scale bytes differ from the reference "
                    f"(first data mismatches at {idx}; unwritten 0x{POISON:X} bytes: "
                    f"{int(((data == POISON) & (want_d != POISON)).sum())} data, "
                    f"{int(((scale == POISON) & (want_s != POISON)).sum())} scale); "
                    f"the kernel equals the explicit g/(1+exp(-g))*u "
                    f"reference: {explicit}; F.silu and the explicit h differ in {h_diff} elements")


@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("fmt, mode", CASES)
def test_bit_exact_against_the_gpu_reference(fmt, mode, layout, dtype, m, n):
    x = make_x(m, n, dtype, seed=m * 7919 + n)
    g = None
    if fmt == "nvfp4":
        from kernelforge.testing import global_scale_of_amax

        g = global_scale_of_amax(silu_mul_ref(x).float().abs().amax().reshape(1))
    check(x, fmt, mode, layout, g, f"{fmt}/{mode}/{layout}/{dtype} {m}x{n}")


@pytest.mark.parametrize("fmt, mode", CASES)
def test_strided_misaligned_and_batched_inputs(fmt, mode):
    base = make_x(67, 2048 + 16, torch.bfloat16, seed=5)
    strided = base[:, 16: 16 + 2 * 1024]  # row stride 2 * 2064 elements: still 16-byte aligned rows
    check(strided, fmt, mode, "swizzled", None, "strided x")
    odd = base.view(-1)[1: 1 + 41 * 256].view(41, 256)  # a 2-byte aligned pointer: the `any` K-class
    check(odd, fmt, mode, "linear", None, "misaligned x")
    check(make_x(6 * 5, 512, torch.float16, seed=9).view(6, 5, 1024), fmt, mode, "swizzled", None, "3-D x")


def test_fresh_outputs_have_the_format_dtypes():
    from kf_silu_quant.ops import silu_mul_quantize

    x = make_x(3, 64, torch.bfloat16, seed=1)
    d, s = silu_mul_quantize(x, "mxfp8")
    assert (d.dtype, s.dtype, d.shape, s.shape) == (torch.float8_e4m3fn, torch.float8_e8m0fnu, (3, 64), (3, 2))
    d, s = silu_mul_quantize(x, "nvfp4", layout="swizzled")
    assert (d.dtype, s.dtype, d.shape, s.shape) == (torch.float4_e2m1fn_x2, torch.float8_e4m3fn, (3, 32), (128, 4))
    want = silu_mul_quantize_ref(x, "nvfp4", layout="swizzled")
    assert torch.equal(d.view(torch.uint8), want[0]) and torch.equal(s.view(torch.uint8), want[1])


def test_empty_inputs():
    from kf_silu_quant.ops import silu_mul_quantize

    d, s = silu_mul_quantize(torch.empty(0, 128, dtype=torch.bfloat16, device="cuda"), "mxfp8", layout="swizzled")
    assert d.shape == (0, 64) and s.shape == (0, 4)
    d, s = silu_mul_quantize(torch.empty(5, 0, dtype=torch.bfloat16, device="cuda"), "nvfp4", layout="swizzled")
    assert d.shape == (5, 0) and s.shape == (128, 0)


def test_repeated_out_calls_take_the_fast_path_and_stay_exact():
    from kf_silu_quant.ops import silu_mul_quantize

    data, scale = poisoned((129, 2048)), poisoned((256, 64))
    for seed in range(3):  # the second and third calls repeat a remembered, validated call
        x = make_x(129, 2048, torch.bfloat16, seed=100 + seed)
        silu_mul_quantize(x, "mxfp8", layout="swizzled", scale_mode="rceil", out=(data, scale))
        want = silu_mul_quantize_ref(x, "mxfp8", layout="swizzled", scale_mode="rceil")
        assert torch.equal(data, want[0]) and torch.equal(scale, want[1]), seed


def test_torch_compile_runs_the_custom_op():
    from kf_silu_quant.ops import silu_mul_quantize

    x = make_x(37, 1024, torch.float16, seed=7)
    g = torch.full((1,), 3.5, dtype=torch.float32, device="cuda")
    torch._dynamo.reset()
    f = torch.compile(lambda x, g: silu_mul_quantize(x, "nvfp4", layout="swizzled", global_scale=g),
                      backend="aot_eager", fullgraph=True)
    d, s = f(x, g)
    want = silu_mul_quantize_ref(x, "nvfp4", layout="swizzled", global_scale=g)
    assert torch.equal(d.view(torch.uint8), want[0]) and torch.equal(s.view(torch.uint8), want[1])
