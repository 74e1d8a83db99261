"""The ops as torch custom ops (`kf_quack::*`), on the CPU: their fake implementations' shapes and
dtypes (meta tensors) and tracing through torch.compile."""
from __future__ import annotations

import torch
from kf_quack.ops import cross_entropy, rmsnorm, softmax


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_fakes_give_the_output_shapes_and_dtypes():
    x, w = meta(3, 5, 4096), meta(4096, dtype=torch.float32)
    out, res = torch.ops.kf_quack.rmsnorm(x, w, meta(3, 5, 4096, dtype=torch.float32), torch.float16, 1e-6)
    assert (out.shape, out.dtype, res.shape, res.dtype) == (x.shape, torch.float16, x.shape, torch.float32)
    out, res = torch.ops.kf_quack.rmsnorm(x, w, None, None, 1e-6)
    assert (out.dtype, tuple(res.shape)) == (torch.bfloat16, (0,))
    y = torch.ops.kf_quack.softmax(meta(7, 32768, dtype=torch.float16))
    assert (tuple(y.shape), y.dtype) == ((7, 32768), torch.float16)
    loss, lse = torch.ops.kf_quack.cross_entropy(meta(9, 128256), meta(9, dtype=torch.int64), -100)
    assert (tuple(loss.shape), loss.dtype, tuple(lse.shape)) == ((9,), torch.float32, (9,))


def test_traced_as_the_custom_ops_under_torch_compile():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    def f(x, w, r, t):
        out, res = rmsnorm(x, w, r, prenorm=True)
        return out, res, softmax(out), cross_entropy(out, t, reduction="none", return_lse=True)

    torch._dynamo.reset()
    out, res, y, (loss, lse) = torch.compile(f, backend=backend, fullgraph=True)(
        meta(37, 4096), meta(4096), meta(37, 4096), meta(37, dtype=torch.int64))
    assert (tuple(out.shape), tuple(res.shape), tuple(y.shape), tuple(loss.shape)) == ((37, 4096),) * 3 + ((37,),)
    targets = graphs[0]
    for op in ("rmsnorm", "softmax", "cross_entropy"):
        assert any(t.startswith(f"kf_quack.{op}") for t in targets), (op, targets)
