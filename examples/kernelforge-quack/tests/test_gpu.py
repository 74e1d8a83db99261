"""GPU: every declared variant against quack's own path (`quack.rmsnorm`, `quack.softmax`,
`quack.cross_entropy`), bit for bit, on fresh random inputs, into outputs poisoned with 0xA5 (so
an unwritten byte shows); the references within a tolerance; a fresh process running the ops
imports neither cutlass nor quack; a miss names the build command.

Needs a CUDA GPU, quack-kernels (with CuTe-DSL) and a cache holding the package's variants
($KERNELFORGE_CACHE_DIR, or what kernelforge resolves by default: an installed kernel wheel);
skipped without a GPU (failed instead where KERNELFORGE_REQUIRE_GPU=1). quack's own path compiles (or
loads from its `.o` cache) in this process.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

from kf_quack.family import FAMILIES  # noqa: E402
from kf_quack.ops import cross_entropy, cross_entropy_rows, rmsnorm, softmax  # noqa: E402
from kf_quack.reference import cross_entropy_ref, rmsnorm_ref, softmax_ref  # noqa: E402

from kernelforge.errors import KernelNotBuilt, UnsupportedShape  # noqa: E402

POISON = 0xA5
ROWS = (1, 37, 1000)  # one row, an odd count, more rows than one CTA's tile
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def quack():
    """quack itself; without it the comparisons skip, or fail where KERNELFORGE_REQUIRE_GPU=1 (a GPU
    runner, on which a comparison that did not run did not pass)."""
    try:
        return importlib.import_module("quack")
    except ImportError as exc:
        if os.environ.get("KERNELFORGE_REQUIRE_GPU") == "1":
            pytest.fail(f"KERNELFORGE_REQUIRE_GPU=1 but quack-kernels is not importable: {exc}", pytrace=False)
        pytest.skip(f"quack-kernels is not importable here: {exc}")


@pytest.fixture(scope="module", autouse=True)
def registered():
    from kf_quack.family import ensure_registered

    ensure_registered()


def declared(op: str) -> list:
    """The variants of `op` the package's spec declares for this GPU's arch (read at collection)."""
    from kf_quack.family import ensure_registered

    from kernelforge.spec import load_specs

    ensure_registered()
    family = next(f for f in FAMILIES if f.name == op)
    arch = {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get(torch.cuda.get_device_capability())
    return [v for v in load_specs(list(family.spec_files)) if v.arch == arch]


def params(op: str):
    return [pytest.param(v, id=v.name) for v in declared(op)]


def poisoned(shape, dtype) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device="cuda")
    t.view(torch.uint8).fill_(POISON)
    return t


def mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    """Elements whose bits differ (NaN-safe; shapes and dtypes must agree)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    bits = BITS[got.element_size()]
    return int((got.contiguous().view(bits) != want.contiguous().view(bits)).sum())


def randn(shape, dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=gen) * scale).to(dtype)


DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "int64": torch.int64,
          "int32": torch.int32}


@pytest.mark.parametrize("v", params("quack_rmsnorm"))
def test_rmsnorm_is_quacks_bit_for_bit(v):
    q = quack()
    dtype, out_dtype = DTYPES[v.dtype], DTYPES[v.out_dtype]
    for i, m in enumerate(ROWS):
        x = randn((m, v.n), dtype, seed=i)
        w = None if v.weight_dtype == "none" else randn((v.n,), DTYPES[v.weight_dtype], seed=100 + i)
        r = None if v.residual == "none" else randn((m, v.n), DTYPES[v.residual], seed=200 + i)
        out = poisoned((m, v.n), out_dtype)
        res_out = None if r is None else poisoned((m, v.n), r.dtype)
        got = rmsnorm(x, w, r, out_dtype=out_dtype, eps=1e-6, prenorm=True, out=out, residual_out=res_out)
        want = q.rmsnorm(x, w, residual=r, out_dtype=out_dtype, eps=1e-6, prenorm=True)
        assert got[0] is out
        bad = mismatches(out, want[0])
        bad_res = 0 if r is None else mismatches(res_out, want[1])
        assert (bad, bad_res) == (0, 0), f"{v.name} M={m}: {bad} output and {bad_res} residual_out mismatches"
        ref, ref_res = rmsnorm_ref(x, w, r, eps=1e-6, out_dtype=out_dtype)
        torch.testing.assert_close(out.float(), ref.float(), atol=0.05, rtol=0.02)
        if r is not None:
            torch.testing.assert_close(res_out.float(), ref_res.float(), atol=0.05, rtol=0.02)


@pytest.mark.parametrize("v", params("quack_softmax"))
def test_softmax_is_quacks_bit_for_bit(v):
    q = quack()
    for i, m in enumerate(ROWS):
        x = randn((m, v.n), DTYPES[v.dtype], seed=300 + i, scale=4.0)
        out = poisoned((m, v.n), x.dtype)
        assert softmax(x, out=out) is out
        bad = mismatches(out, q.softmax(x))
        assert bad == 0, f"{v.name} M={m}: {bad} mismatches"
        torch.testing.assert_close(out.float(), softmax_ref(x).float(), atol=2e-3, rtol=0.02)


@pytest.mark.parametrize("v", params("quack_cross_entropy"))
def test_cross_entropy_is_quacks_bit_for_bit(v):
    q = quack()
    fwd = sys.modules["quack.cross_entropy"].cross_entropy_fwd
    for i, m in enumerate(ROWS):
        x = randn((m, v.n), DTYPES[v.dtype], seed=400 + i, scale=3.0)
        gen = torch.Generator(device="cuda").manual_seed(500 + i)
        t = torch.randint(0, v.n, (m,), device="cuda", generator=gen).to(DTYPES[v.target_dtype])
        if m > 1:
            t[m // 2] = -100  # an ignored row (not the only one: the mean stays a number)
        loss, lse = poisoned((m,), torch.float32), poisoned((m,), torch.float32)
        cross_entropy_rows(x, t, out=(loss, lse))
        want_loss, want_lse = fwd(x, t, return_lse=True)
        bad = (mismatches(loss, want_loss), mismatches(lse, want_lse))
        assert bad == (0, 0), f"{v.name} M={m}: {bad[0]} loss and {bad[1]} lse mismatches"
        for reduction in ("none", "sum", "mean"):
            got = cross_entropy(x, t, reduction=reduction)
            assert mismatches(got, q.cross_entropy(x, t, reduction=reduction)) == 0, (v.name, m, reduction)
        ref_loss, ref_lse = cross_entropy_ref(x, t)
        torch.testing.assert_close(loss, ref_loss, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)


def test_leading_dimensions_and_strided_rows():
    """x [B, S, N] and a row-strided view are served like quack serves them."""
    q = quack()
    v = declared("quack_rmsnorm")[0]
    x = randn((3, 5, v.n), DTYPES[v.dtype], seed=7)
    w = randn((v.n,), DTYPES[v.weight_dtype], seed=8)
    assert mismatches(rmsnorm(x, w), q.rmsnorm(x, w)) == 0
    s = declared("quack_softmax")[0]
    wide = randn((9, 2 * s.n), DTYPES[s.dtype], seed=9)
    assert mismatches(softmax(wide[:, : s.n]), q.softmax(wide[:, : s.n].contiguous())) == 0


def test_a_misaligned_input_is_refused():
    s = declared("quack_softmax")[0]
    buf = randn((4 * s.n + 8,), DTYPES[s.dtype], seed=10)
    x = buf[1: 1 + 4 * s.n].view(4, s.n)  # 2- or 4-byte aligned: not the 16 bytes quack's kernel assumes
    with pytest.raises(UnsupportedShape, match="16"):
        softmax(x)


def test_an_undeclared_n_names_the_build_command():
    x = torch.zeros(4, 5120, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(KernelNotBuilt) as info:
        softmax(x)
    text = str(info.value)
    assert "kernelforge build --spec quack_softmax-bfloat16-5120.toml --arch sm_90a" in text, text
    assert 'n = [5120]' in text, text


FRESH = """
import json, sys, torch
from kf_quack.family import ensure_registered
ensure_registered()
from kf_quack.ops import cross_entropy, rmsnorm, softmax
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
rmsnorm(x, torch.randn(4096, device="cuda", dtype=torch.bfloat16))
softmax(x)
xe = torch.randn(64, 32768, device="cuda", dtype=torch.bfloat16)
cross_entropy(xe, torch.zeros(64, device="cuda", dtype=torch.int64))
torch.cuda.synchronize()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("cutlass", "quack"))))
"""


def test_a_fresh_process_runs_the_ops_without_cutlass_or_quack():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), *sys.path]))
    proc = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
