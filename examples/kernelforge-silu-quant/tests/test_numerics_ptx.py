"""The kernel's activation is compiled onto the precise fp32 path (README "Numerics"), checked on
the PTX of real variants (CPU only: CuTe-DSL compiles without a GPU).

Per element: one libdevice `__nv_expf` (range reduction with fma.rm, then ex2.approx.ftz on the
reduced argument: CUDA's precise expf, what nvcc emits for expf without fast math), one `add.rn`,
one IEEE `div.rn` and one `mul.rn`; never the fast-math exp (ex2.approx of x * log2e alone),
an approximate reciprocal or division, or flush-to-zero arithmetic outside expf's core.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
COMPILE = r"""
import json, sys, glob
import cutlass.cute as cute
from kf_silu_quant.family import ensure_registered, SPEC_FILE
ensure_registered()
from kernelforge.spec import load_specs
from kf_silu_quant.build import silu_mul_quantize_args
v = next(v for v in load_specs([SPEC_FILE]) if v.name == sys.argv[1])
kernel, args = silu_mul_quantize_args(v)
cute.compile(kernel, *args, options=f"--enable-tvm-ffi --opt-level 3 --gpu-arch {v.arch} --keep-ptx --dump-dir {sys.argv[2]}")
print(json.dumps(glob.glob(sys.argv[2] + "/*.ptx")))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name, block", [
    ("silu_mul_quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128", 32),
    ("silu_mul_quantize.nvfp4.none.swizzled.float16.any.sm_100a.t128", 16),
])
def test_activation_uses_precise_expf_and_ieee_division(family, tmp_path, name, block):
    proc = subprocess.run([sys.executable, "-c", "import cutlass.cute"], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"CuTe-DSL (cutlass) cannot be imported, so nothing can be compiled: {proc.stderr[-200:]}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), *sys.path]))
    proc = subprocess.run([sys.executable, "-c", COMPILE, name, str(tmp_path)], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    (ptx,) = json.loads(proc.stdout.strip().splitlines()[-1])
    body = Path(ptx).read_text()
    ops = re.findall(r"^\s*([a-z][a-z0-9_.]*)\s", body, flags=re.M)

    def count(op: str) -> int:
        return sum(1 for o in ops if o == op)

    assert count("ex2.approx.ftz.f32") == block  # one expf per element of the thread's block ...
    assert count("fma.rm.f32") == block  # ... each with __nv_expf's range reduction
    assert count("cvt.sat.f32.f32") == block
    assert count("div.rn.f32") == block  # IEEE division
    assert count("add.rn.f32") == block  # 1 + e, never contracted
    for bad in ("rcp.approx.f32", "rcp.approx.ftz.f32", "div.approx.f32", "div.approx.ftz.f32", "div.full.f32",
                "div.rn.ftz.f32", "mul.ftz.f32", "fma.rn.ftz.f32", "add.ftz.f32", "ex2.approx.f32", "lg2.approx.f32"):
        assert count(bad) == 0, bad
    # The reduction constants of __nv_expf (log2(e) split in two; x is negated into them or not).
    assert re.search(r"0f[3B]FB8AA3B", body) and re.search(r"0f[3B]2A57060", body)
