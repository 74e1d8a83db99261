"""Columnwise / dual quantization and NVFP4 with the random Hadamard transform on the CPU:
references, argument checks (raised before the CUDA check, exactly as on a GPU), fake
implementations under torch.compile, spec enumeration and K-class eligibility."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelforge
from kernelforge.families.quantize_columnwise.op import hadamard_columns
from kernelforge.families.quantize_columnwise.reference import (
    quantize_columnwise_ref,
    quantize_nvfp4_rht_ref,
    rht_matrix,
    rht_ref,
)
from kernelforge.formats import FORMATS
from kernelforge.spec import load_specs
from kernelforge.spec.model import KClass
from kernelforge.testing.references import quantize_ref

CUDA_ONLY = r"x: expected a CUDA tensor, got a tensor on cpu"


def _x(m: int, k: int, dtype=torch.bfloat16) -> torch.Tensor:
    return (torch.randn(m, k) * torch.exp2(torch.randint(-6, 6, (m, 1)).float())).to(dtype)


# ---- references ----

def test_rht_matrix_is_the_signed_sylvester_hadamard_over_four():
    r = rht_matrix(0)
    assert torch.equal(r * 4, (r * 4).t())  # Sylvester-Hadamard is symmetric
    assert torch.allclose(r @ r.t(), torch.eye(16, dtype=torch.float64))
    assert r[0].eq(0.25).all() and r[:, 0].eq(0.25).all()
    assert r[3, 5] == -0.25 and r[3, 12] == 0.25 and r[7, 7] == -0.25  # popcount(i & j) odd -> negative
    signed = rht_matrix(0b101)
    assert torch.equal(signed[0], -r[0]) and torch.equal(signed[2], -r[2]) and torch.equal(signed[1], r[1])


def test_rht_ref_against_an_explicit_sum():
    x = _x(32, 48)
    y = rht_ref(x, 0xD7E8)
    r = rht_matrix(0xD7E8)
    n, c, j = 5, 1, 9
    want = sum(float(x[16 * c + i, n]) * float(r[i, j]) for i in range(16))
    assert y.shape == (48, 32) and y.dtype == torch.bfloat16
    assert float(y[n, 16 * c + j]) == float(torch.tensor(want).to(torch.bfloat16))


def test_torch_butterfly_matches_the_reference_within_one_bf16_step():
    x = _x(64, 128)
    a, b = hadamard_columns(x).float(), rht_ref(x).float()
    rel = ((a - b).abs() / b.abs().clamp_min(1e-30))
    assert (rel <= 2 ** -7).all()
    assert (a == b).float().mean() > 0.99


def test_columnwise_ref_is_rowwise_of_the_transpose():
    x = _x(64, 96)
    d, s = quantize_columnwise_ref(x, "mxfp8", layout="swizzled")
    rd, rs = quantize_ref(x.t().contiguous(), "mxfp8", layout="swizzled")
    assert torch.equal(d, rd) and torch.equal(s, rs) and d.shape == (96, 64)


def test_nvfp4_rht_ref_outputs():
    x = _x(32, 64)
    d, s, dt, st = quantize_nvfp4_rht_ref(x)
    assert d.shape == (32, 32) and dt.shape == (64, 16) and s.shape == (128, 4) and st.shape == (128, 4)


# ---- argument checks ----

@pytest.mark.parametrize("fmt", list(FORMATS))
def test_valid_columnwise_calls_reach_the_cuda_check(fmt):
    b = FORMATS[fmt].block
    for rowwise in (True, False):
        with pytest.raises(ValueError, match=CUDA_ONLY):
            kernelforge.quantize(_x(2 * b, 4 * b), fmt, rowwise=rowwise, columnwise=True)
    with pytest.raises(ValueError, match=CUDA_ONLY):  # columnwise only: any K
        kernelforge.quantize(_x(2 * b, 7), fmt, rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match=CUDA_ONLY):  # leading dims flatten to M
        kernelforge.quantize(_x(2 * b, 4 * b).reshape(2, b, 4 * b), fmt, columnwise=True)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_columnwise_errors(fmt):
    b = FORMATS[fmt].block
    with pytest.raises(ValueError, match=rf"M = {b + 1} .* multiple of .* B = {b}"):
        kernelforge.quantize(_x(b + 1, 4 * b), fmt, columnwise=True)
    with pytest.raises(ValueError, match=rf"K = {b + 2}"):
        kernelforge.quantize(_x(b, b + 2), fmt, columnwise=True)  # dual needs whole rowwise blocks
    with pytest.raises(ValueError, match="at least one output"):
        kernelforge.quantize(_x(b, b), fmt, rowwise=False, columnwise=False)
    with pytest.raises(TypeError, match="columnwise: expected a bool"):
        kernelforge.quantize(_x(b, b), fmt, columnwise="yes")
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        kernelforge.quantize(torch.zeros(b, dtype=torch.bfloat16), fmt, columnwise=True)
    with pytest.raises(TypeError, match=r"out: expected a \(data, scale, data_t, scale_t\)"):
        kernelforge.quantize(_x(b, b), fmt, columnwise=True, out=(torch.empty(1), torch.empty(1)))
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        kernelforge.quantize(_x(4 * b, b).t(), fmt, columnwise=True)
    rows = 65535 * 64 // 128 * 128 + 128  # one 128-row step past the grid's 65535 M tiles
    with pytest.raises(ValueError, match=rf"M = {rows} rows is too many .*at most {rows - 128}"):
        kernelforge.quantize(torch.zeros(1, b, dtype=torch.bfloat16).expand(rows, b), fmt, columnwise=True)


def test_columnwise_out_buffer_checks():
    x = _x(64, 128)
    good = [torch.empty(128, 64, dtype=torch.float8_e4m3fn), torch.empty(128, 2, dtype=torch.float8_e8m0fnu)]
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.quantize(x, "mxfp8", rowwise=False, columnwise=True, out=tuple(good))
    with pytest.raises(ValueError, match=r"^out\[0\] \(data_t\): expected shape \[128, 64\]"):
        kernelforge.quantize(x, "mxfp8", rowwise=False, columnwise=True, out=(torch.empty(64, 128, dtype=torch.uint8), good[1]))
    rows = [torch.empty(64, 128, dtype=torch.float8_e4m3fn), torch.empty(64, 4, dtype=torch.float8_e8m0fnu)]
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.quantize(x, "mxfp8", columnwise=True, out=(*rows, *good))
    with pytest.raises(ValueError, match=r"^out\[3\] \(scale_t\): expected shape \[128, 2\]"):
        kernelforge.quantize(x, "mxfp8", columnwise=True, out=(*rows, good[0], rows[1]))
    with pytest.raises(ValueError, match=r"^out\[1\] \(scale\): expected shape \[64, 4\]"):
        kernelforge.quantize(x, "mxfp8", columnwise=True, out=(rows[0], good[1], *good))


def test_global_scale_checks_name_their_argument():
    x = _x(64, 64)
    with pytest.raises(ValueError, match="global_scale: only NVFP4"):
        kernelforge.quantize(x, "mxfp8", columnwise=True, global_scale=torch.ones(1))
    with pytest.raises(ValueError, match=r"global_scale_col: expected shape \[1\]"):
        kernelforge.quantize_nvfp4_rht(x, global_scale_col=torch.ones(2))
    with pytest.raises(ValueError, match="global_scale_row: expected dtype torch.float32"):
        kernelforge.quantize_nvfp4_rht(x, global_scale_row=torch.ones(1, dtype=torch.float64))


def test_rht_errors_and_valid_calls():
    x = _x(64, 64)
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.quantize_nvfp4_rht(x)
    with pytest.raises(ValueError, match=CUDA_ONLY):
        kernelforge.quantize_nvfp4_rht(_x(48, 80), rowwise=False, layout="linear")
    for bad, match in ((_x(40, 64), "multiples of 16"), (_x(64, 72), "multiples of 16"),
                       (_x(64, 64, torch.float16), "dtype bfloat16"), (_x(64, 64).reshape(2, 32, 64), "2-D")):
        with pytest.raises(ValueError, match=match):
            kernelforge.quantize_nvfp4_rht(bad)
    for mask in (-1, 1 << 16, 1.5, True):
        with pytest.raises(ValueError, match="sign_mask"):
            kernelforge.quantize_nvfp4_rht(x, sign_mask=mask)
    with pytest.raises(ValueError, match="at least one output"):
        kernelforge.quantize_nvfp4_rht(x, rowwise=False, columnwise=False)
    with pytest.raises(ValueError, match="global_scale_col: only used with columnwise"):
        kernelforge.quantize_nvfp4_rht(x, columnwise=False, global_scale_col=torch.ones(1))
    with pytest.raises(ValueError, match="layout"):
        kernelforge.quantize_nvfp4_rht(x, layout="tiled")
    with pytest.raises(ValueError, match="multiples of 16"):
        kernelforge.rht_global_scale(_x(40, 64))
    with pytest.raises(ValueError, match="sign_mask"):
        kernelforge.rht_global_scale(x, sign_mask=1 << 16)
    with pytest.raises(ValueError, match="2-D"):
        kernelforge.rht_global_scale(x.reshape(2, 32, 64))


def test_rht_global_scale_on_cpu_matches_the_reference():
    x = _x(64, 32)
    g = kernelforge.rht_global_scale(x)
    assert g.item() == pytest.approx(448 * 6 / rht_ref(x).float().abs().max().item(), rel=1e-2)


# ---- torch.library fakes ----

@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_fake_implementations(fmt, layout):
    f = FORMATS[fmt]
    mode = "none" if f.has_global_scale else "floor"
    with FakeTensorMode():
        x = torch.empty(2, 64, 256, dtype=torch.bfloat16)
        d, s, dt, st = torch.ops.kernelforge.quantize_columnwise(x, fmt, layout, mode, None, True)
        e_d, e_s, dt2, st2 = torch.ops.kernelforge.quantize_columnwise(x, fmt, layout, mode, None, False)
    kb = 256 // f.block
    assert d.shape == (2, 64, 256 * f.element_bits // 8) and dt.shape == (256, 128 * f.element_bits // 8)
    assert dt.dtype == getattr(torch, f.data_dtype) and st.dtype == getattr(torch, f.scale_dtype)
    if layout == "linear":
        assert s.shape == (128, kb) and st.shape == (256, 128 // f.block)
    else:
        assert s.shape == (128, -(-kb // 4) * 4) and st.shape == (256, max(4, 128 // f.block))
    assert e_d.numel() == 0 and e_s.numel() == 0 and dt2.shape == dt.shape and st2.shape == st.shape


def test_fake_rht_and_compile_traces_without_graph_break():
    with FakeTensorMode():
        x = torch.empty(64, 128, dtype=torch.bfloat16)
        d, s, dt, st = torch.ops.kernelforge.quantize_nvfp4_rht(x, None, None, 0xD7E8, True, "swizzled")
    assert d.shape == (64, 64) and dt.shape == (128, 32) and st.shape == (128, 4)

    def f(x):
        a = kernelforge.quantize(x, "mxfp4", columnwise=True)
        b = kernelforge.quantize_nvfp4_rht(x, rowwise=False)
        return a[2], b[0]

    from torch._dynamo.testing import CompileCounterWithBackend

    cnt = CompileCounterWithBackend("eager")
    fn = torch.compile(f, backend=cnt, fullgraph=True)
    with pytest.raises(Exception, match="CUDA"):  # traced fully; the CPU run then hits the CUDA check
        fn(torch.zeros(64, 128, dtype=torch.bfloat16))
    assert cnt.frame_count == 1


# ---- specs and K-classes ----

def test_default_specs_declare_the_columnwise_variants():
    spec = Path(__file__).resolve().parents[2] / "specs" / "quantize_columnwise.toml"
    variants = list(load_specs([spec]))
    rht = [v for v in variants if v.transform == "rht"]
    assert len(variants) == 256 and len(rht) == 16
    assert {(v.format, v.dtype) for v in rht} == {("nvfp4", "bfloat16")}
    assert {v.kclass.name for v in variants} == {"tile", "edge"}


def test_tile_class_eligibility_on_both_sides():
    tile = KClass("tile", k_multiple_blocks=4, vector_bytes=16, m_multiple=64)
    edge = KClass("edge", k_multiple_blocks=1, vector_bytes=0)
    b = 16
    assert tile.accepts(64, b, 16, 128, m=64) and tile.accepts(128, b, 16, 256, m=128)
    for k, m, align in ((48, 64, 16), (80, 64, 16), (64, 48, 16), (64, 80, 16), (64, 64, 8)):
        assert not tile.accepts(k, b, align, k * 2, m=m), (k, m, align)
        assert edge.accepts(k, b, align, k * 2, m=m)
    assert edge.accepts(7, b, 2, 14, m=16)  # columnwise only: any K
    assert tile.to_dict()["m_multiple"] == 64 and "m_multiple" not in edge.to_dict()
    assert KClass.from_dict(tile.to_dict()) == tile
