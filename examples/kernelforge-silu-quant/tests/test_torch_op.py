"""The op as a torch custom op (`kf_silu_quant::silu_mul_quantize`), on the CPU: its fake
implementation's shapes and dtypes (meta tensors) and tracing through torch.compile."""
from __future__ import annotations

import pytest
import torch
from kf_silu_quant.ops import silu_mul_quantize, silu_mul_quantize_op

CASES = [  # format, mode, layout, x shape -> data shape, scale shape, dtypes
    ("mxfp8", "floor", "linear", (37, 192), (37, 96), (37, 3), torch.float8_e4m3fn, torch.float8_e8m0fnu),
    ("mxfp8", "rceil", "swizzled", (37, 192), (37, 96), (128, 4), torch.float8_e4m3fn, torch.float8_e8m0fnu),
    ("nvfp4", "none", "swizzled", (6, 5, 1024), (6, 5, 256), (128, 32), torch.float4_e2m1fn_x2, torch.float8_e4m3fn),
    ("nvfp4", "none", "linear", (3, 64), (3, 16), (3, 2), torch.float4_e2m1fn_x2, torch.float8_e4m3fn),
]


@pytest.mark.parametrize("fmt, mode, layout, shape, d_shape, s_shape, d_dtype, s_dtype", CASES)
def test_fake_implementation_gives_the_output_shapes_and_dtypes(fmt, mode, layout, shape, d_shape, s_shape,
                                                                 d_dtype, s_dtype):
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta")
    d, s = torch.ops.kf_silu_quant.silu_mul_quantize(x, fmt, layout, mode, None)
    assert (tuple(d.shape), d.dtype, tuple(s.shape), s.dtype) == (d_shape, d_dtype, s_shape, s_dtype)


def test_traced_as_the_custom_op_under_torch_compile():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(lambda x: silu_mul_quantize(x * 2, "mxfp8", layout="swizzled", scale_mode="rceil"),
                      backend=backend, fullgraph=True)
    d, s = f(torch.empty(37, 192, dtype=torch.bfloat16, device="meta"))
    assert (tuple(d.shape), tuple(s.shape)) == ((37, 96), (128, 4))
    assert any(t.startswith("kf_silu_quant.silu_mul_quantize") for t in graphs[0]), graphs
    assert silu_mul_quantize_op.custom is not None
