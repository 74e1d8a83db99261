"""torch.library integration on the CPU: op registration, fake (meta) implementations with
exact shapes and dtypes, and torch.compile(fullgraph=True) tracing with no graph break."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelforge
import kernelforge.ops  # noqa: F401  (registers torch.ops.kernelforge.*)
from kernelforge.formats import FORMATS
from tests.ops._compile_helpers import capture

REPO = Path(__file__).resolve().parents[2]


def expected(fmt: str, shape: tuple[int, ...], layout: str):
    """(data shape, data dtype, scale shape, scale dtype) from docs/numerics.md."""
    f = FORMATS[fmt]
    m = 1
    for d in shape[:-1]:
        m *= d
    k = shape[-1]
    data = ((*shape[:-1], k * f.element_bits // 8), getattr(torch, f.data_dtype))
    kb = k // f.block
    s = (m, kb) if layout == "linear" else ((m + 127) // 128 * 128, (kb + 3) // 4 * 4)
    return (*data, s, getattr(torch, f.scale_dtype))


def test_ops_are_registered_with_the_mutation_declared():
    ops = torch.ops.kernelforge
    for name in ("quantize", "rmsnorm_quantize", "add_rmsnorm_quantize"):
        assert hasattr(ops, name)
    schema = ops.add_rmsnorm_quantize.default._schema
    residual = next(a for a in schema.arguments if a.name == "residual")
    assert residual.alias_info is not None and residual.alias_info.is_write
    for name in ("quantize", "rmsnorm_quantize"):
        assert all(a.alias_info is None for a in getattr(ops, name).default._schema.arguments)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("shape", [(130, 512), (2, 3, 1024), (0, 256)])
def test_fake_implementations(fmt, layout, shape):
    mode = "none" if FORMATS[fmt].has_global_scale else "rceil"
    with FakeTensorMode():
        x = torch.empty(shape, dtype=torch.bfloat16)
        w = torch.empty(shape[-1], dtype=torch.bfloat16)
        outs = [
            torch.ops.kernelforge.quantize(x, fmt, layout, mode, None),
            torch.ops.kernelforge.rmsnorm_quantize(x, w, fmt, 1e-6, layout, mode, None),
            torch.ops.kernelforge.add_rmsnorm_quantize(x, torch.empty_like(x), w, fmt, 1e-6, layout, mode, None),
        ]
    d_shape, d_dtype, s_shape, s_dtype = expected(fmt, shape, layout)
    for d, s in outs:
        assert (tuple(d.shape), d.dtype, tuple(s.shape), s.dtype) == (d_shape, d_dtype, s_shape, s_dtype)


def test_fake_rejects_bad_format():
    with FakeTensorMode(), pytest.raises(ValueError, match="^format: expected one of"):
        torch.ops.kernelforge.quantize(torch.empty(4, 64), "fp8", "linear", "floor", None)


def test_compile_traces_every_op_without_graph_breaks():
    def block(x, r, w, g):
        d0, s0 = kernelforge.quantize(x * 2, "nvfp4", layout="swizzled", global_scale=g)
        d1, s1 = kernelforge.rmsnorm_quantize(x, w, "mxfp8", scale_mode="rceil")
        d2, s2 = kernelforge.add_rmsnorm_quantize(x, r, w, "mxfp4", eps=1e-5)
        return d0, s0, d1, s1, d2, s2, r + 1

    x = torch.randn(3, 5, 256, dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.randn(256, dtype=torch.bfloat16)
    gm, _ = capture(block, x, r, w, torch.ones(1))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    for name in ("kernelforge.quantize", "kernelforge.rmsnorm_quantize", "kernelforge.add_rmsnorm_quantize"):
        assert any(name in t for t in targets), (name, targets)


def test_compile_with_out_buffers_copies_into_them():
    def f(x, w, d, s):
        return kernelforge.rmsnorm_quantize(x, w, "nvfp4", out=(d, s))

    x = torch.randn(128, 256, dtype=torch.bfloat16)
    w = torch.randn(256, dtype=torch.bfloat16)
    d = torch.empty(128, 128, dtype=torch.uint8)
    s = torch.empty(128, 16, dtype=torch.float8_e4m3fn)
    gm, _ = capture(f, x, w, d, s)
    targets = [str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert any("kernelforge.rmsnorm_quantize" in t for t in targets)
    assert sum("copy_" in t for t in targets) == 2, targets


# --- torch.compile in fresh interpreters ------------------------------------------------------
# (Registering the custom ops lazily, on first use, was tried and reverted: torch's inductor
# resolves `torch.ops.kernelforge.<op>` by module path, which a replacement namespace broke on the
# H100 (ObjNotFoundError in torch.compile and opcheck), and the import it saved was ~15 ms against
# ~155 ms of tvm_ffi's import there.)

FRESH_COMPILE = r"""
import json, sys
import torch
from tests.ops._compile_helpers import capture
import kernelforge
x = torch.randn(3, 5, 256, dtype=torch.bfloat16)
if sys.argv[1] == "quantize":
    def block(x, r, w, g):
        d0, s0 = kernelforge.quantize(x * 2, "nvfp4", layout="swizzled", global_scale=g)
        d1, s1 = kernelforge.rmsnorm_quantize(x, w, "mxfp8", scale_mode="rceil")
        d2, s2 = kernelforge.add_rmsnorm_quantize(x, r, w, "mxfp4", eps=1e-5)
        return d0, s0, d1, s1, d2, s2, r + 1
    args = (x, torch.randn_like(x), torch.randn(256, dtype=torch.bfloat16), torch.ones(1))
else:
    def block(w, x, offs, g):
        dw, sw = kernelforge.quantize_experts(w * 2, "nvfp4", global_scale=g)
        dx, sx, ox = kernelforge.quantize_grouped(x, offs, "mxfp8", scale_mode="rceil")
        cols = kernelforge.quantize(x, "mxfp8", columnwise=True)
        rht = kernelforge.quantize_nvfp4_rht(x)
        return dw, sw, dx, sx, ox, *cols, *rht
    args = (torch.randn(4, 130, 256, dtype=torch.bfloat16), torch.randn(256, 256, dtype=torch.bfloat16),
            torch.tensor([100, 256], dtype=torch.int32), torch.ones(4))
gm, _ = capture(block, *args)
print(json.dumps({"targets": sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})}))
"""


def _fresh(code: str, *args: str) -> dict:
    import json
    import subprocess

    # The repository root on the child's path, for `tests.ops._compile_helpers` (and this checkout's kernelforge).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("first", ["quantize", "grouped"])
def test_compile_fullgraph_in_a_fresh_process(first):
    info = _fresh(FRESH_COMPILE, first)
    names = (("quantize", "rmsnorm_quantize", "add_rmsnorm_quantize") if first == "quantize" else
             ("quantize_experts", "quantize_grouped", "quantize_columnwise", "quantize_nvfp4_rht"))
    for name in names:
        assert {f"kernelforge.{name}", f"kernelforge.{name}.default"} & set(info["targets"]), (name, info["targets"])
