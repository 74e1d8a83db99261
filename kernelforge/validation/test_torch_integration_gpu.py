"""PyTorch integration of every op on the GPU: CUDA graphs, streams, torch.compile, opcheck."""
from __future__ import annotations

import pytest
import torch

import kernelforge
import kernelforge.ops  # noqa: F401  (registers torch.ops.kernelforge.*)
from kernelforge.testing.references import quantize_ref

pytestmark = pytest.mark.gpu


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _ops(x, r, w, g):
    """One call of every public op (NVFP4 with a device global scale, MX with rceil/floor)."""
    d0, s0 = kernelforge.quantize(x, "nvfp4", layout="swizzled", global_scale=g)
    d1, s1 = kernelforge.rmsnorm_quantize(x, w, "mxfp8", scale_mode="rceil")
    d2, s2 = kernelforge.add_rmsnorm_quantize(x, r, w, "nvfp4", layout="swizzled", global_scale=g)
    return [d0, s0, d1, s1, d2, s2]


def test_cuda_graph_capture_and_replay():
    """Captured once, replayed on new inputs and a new global scale: equals eager every time."""
    m, h = 256, 2048
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    g = kernelforge.nvfp4_global_scale(x)
    r_work = r.clone()
    _ops(x, r_work, w, g)  # warm-up: modules loaded, default tensors created, outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    r_work.copy_(r)
    with torch.cuda.graph(graph):
        outs = _ops(x, r_work, w, g)
    for step in range(3):
        x.copy_(torch.randn_like(x) * (step + 1))
        r.copy_(torch.randn_like(r))
        g.copy_(kernelforge.nvfp4_global_scale(x))  # read on the device at replay time
        r_work.copy_(r)
        for o in outs:
            _as_bytes(o).fill_(0xA5)
        graph.replay()
        torch.cuda.synchronize()
        r_eager = r.clone()
        expect = _ops(x, r_eager, w, g)
        for got, want in zip(outs, expect):
            assert torch.equal(_as_bytes(got), _as_bytes(want)), f"replay {step} differs from eager"
        assert torch.equal(r_work, r_eager), f"replay {step}: residual differs"
        rd, rs = quantize_ref(x, "nvfp4", layout="swizzled", global_scale=g)
        assert torch.equal(_as_bytes(outs[0]), rd) and torch.equal(_as_bytes(outs[1]), rs)


def test_non_default_stream_orders_fused_ops():
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    r_ref = r.clone()
    want = kernelforge.add_rmsnorm_quantize(x, r_ref, w, "mxfp4")
    # Both ops once before the timed window: a first call loads its module (milliseconds on a
    # busy host), which could outlast the sleep below and make the ordering unprovable.
    want2 = kernelforge.rmsnorm_quantize(x, w, "nvfp4")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)  # the kernels must queue behind this on s
        got = kernelforge.add_rmsnorm_quantize(x, r, w, "mxfp4")
        got2 = kernelforge.rmsnorm_quantize(x, w, "nvfp4")
        ev = torch.cuda.Event()
        ev.record(s)
    assert not ev.query(), "the stream finished too early to prove ordering"
    ev.synchronize()
    assert torch.equal(_as_bytes(got[0]), _as_bytes(want[0])) and torch.equal(_as_bytes(got[1]), _as_bytes(want[1]))
    assert torch.equal(r, r_ref)
    assert torch.equal(_as_bytes(got2[0]), _as_bytes(want2[0]))


def test_torch_compile_fullgraph_matches_eager():
    """A small block traced with fullgraph=True (no graph break), residual mutation included."""
    def block(x, r, w, g):
        y = x * 2
        d, s = kernelforge.add_rmsnorm_quantize(y, r, w, "nvfp4", layout="swizzled", global_scale=g)
        d2, s2 = kernelforge.rmsnorm_quantize(r, w, "mxfp8")
        d3, s3 = kernelforge.quantize(y, "mxfp4", scale_mode="rceil")
        return d, s, d2, s2, d3, s3, r + 1

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    x = torch.randn(3, 100, 1024, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    g = kernelforge.nvfp4_global_scale(x * 2)
    r1, r2 = r.clone(), r.clone()
    got = compiled(x, r1, w, g)
    want = block(x, r2, w, g)
    assert torch.equal(r1, r2), "compiled residual mutation differs from eager"
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(_as_bytes(a) if a.element_size() == 1 else a, _as_bytes(b) if b.element_size() == 1 else b)


@pytest.mark.parametrize("op", ["quantize", "rmsnorm_quantize", "add_rmsnorm_quantize"])
def test_opcheck(op):
    """torch.library.opcheck: schema, fake implementation and real outputs agree."""
    x = torch.randn(130, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    g = kernelforge.nvfp4_global_scale(x)
    fn = getattr(torch.ops.kernelforge, op)
    if op == "quantize":
        args = (x, "nvfp4", "swizzled", "none", g)
    elif op == "rmsnorm_quantize":
        args = (x, w, "mxfp8", 1e-5, "linear", "rceil", None)
    else:
        args = (x, torch.randn_like(x), w, "mxfp4", 1e-6, "swizzled", "floor", None)
    torch.library.opcheck(fn, args, test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


def test_custom_op_path_equals_direct_path():
    x = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, device="cuda", dtype=torch.float16)
    a = torch.ops.kernelforge.rmsnorm_quantize(x, w, "nvfp4", 1e-6, "swizzled", "none", None)
    b = kernelforge.rmsnorm_quantize(x, w, "nvfp4", layout="swizzled")
    assert all(torch.equal(_as_bytes(p), _as_bytes(q)) for p, q in zip(a, b))


_FIRST_UNIT_SCALE_IN_CAPTURE = """
import torch, kernelforge
from kernelforge.testing.references import quantize_ref

def check(x, data, scale, what):
    rd, rs = quantize_ref(x, "nvfp4", layout="swizzled")  # no global scale: 1.0
    assert torch.equal(data.view(torch.uint8), rd) and torch.equal(scale.view(torch.uint8), rs), what

x = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
g = kernelforge.nvfp4_global_scale(x)
kernelforge.quantize(x, "nvfp4", global_scale=g)  # the module is loaded outside the capture
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    data, scale = kernelforge.quantize(x, "nvfp4", layout="swizzled")  # the first call without a global scale
for step in range(2):
    x.copy_(torch.randn_like(x) * (step + 3))
    data.view(torch.uint8).fill_(0xA5)
    scale.view(torch.uint8).fill_(0xA5)
    graph.replay()
    torch.cuda.synchronize()
    check(x, data, scale, f"replay {step}")
del graph, data, scale
torch.cuda.empty_cache()  # the graph's private memory pool goes back: the cached 1.0 must not live there
for _ in range(3):
    junk = torch.full((1 << 20,), 7.0, device="cuda")  # reuse freed memory
    y = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    check(y, *kernelforge.quantize(y, "nvfp4", layout="swizzled"), "eager after the graph was freed")
print("ok")
"""


def test_first_call_without_global_scale_inside_graph_capture():
    """A fresh process whose first NVFP4 call without a global scale is captured into a CUDA graph:
    the stand-in 1.0 is written on a private stream before the call returns, outside the graph's
    memory pool, so replays and later eager calls (graph freed, memory reused) match the reference."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", _FIRST_UNIT_SCALE_IN_CAPTURE], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout[-2000:] + res.stderr[-4000:]
