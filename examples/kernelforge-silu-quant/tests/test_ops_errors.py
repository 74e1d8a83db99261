"""Bad arguments of `silu_mul_quantize` raise before anything runs, naming the argument (no GPU needed)."""
from __future__ import annotations

import pytest
import torch
from kf_silu_quant.ops import silu_mul_quantize

X = torch.zeros(4, 128, dtype=torch.bfloat16)  # N = 64: two MXFP8 blocks, four NVFP4 blocks


@pytest.mark.parametrize("call, exc, match", [
    (lambda: silu_mul_quantize(X, "mxfp4"), ValueError, r"^format: expected one of \['mxfp8', 'nvfp4'\]"),
    (lambda: silu_mul_quantize(X, "int8"), ValueError, r"^format: "),
    (lambda: silu_mul_quantize(X, "mxfp8", layout="tiled"), ValueError, r"^layout: "),
    (lambda: silu_mul_quantize(X, "mxfp8", scale_mode="none"), ValueError, r"^scale_mode: "),
    (lambda: silu_mul_quantize(X, "nvfp4", scale_mode="rceil"), ValueError, r"^scale_mode: "),
    (lambda: silu_mul_quantize([1.0], "mxfp8"), TypeError, r"^x: expected a torch.Tensor"),
    (lambda: silu_mul_quantize(X.float(), "mxfp8"), ValueError, r"^x: expected dtype bfloat16 or float16"),
    (lambda: silu_mul_quantize(torch.zeros((), dtype=torch.bfloat16), "mxfp8"), ValueError, r"^x: expected at least one"),
    (lambda: silu_mul_quantize(torch.zeros(4, 127, dtype=torch.bfloat16), "mxfp8"), ValueError,
     r"^x: the last dimension \(127\) must be 2N"),
    (lambda: silu_mul_quantize(torch.zeros(4, 96, dtype=torch.bfloat16), "mxfp8"), ValueError,
     r"^x: the last dimension \(96\) must be 2N .* B = 32"),
    (lambda: silu_mul_quantize(torch.zeros(128, 4, dtype=torch.bfloat16).t(), "mxfp8"), ValueError,
     r"^x: the last dimension \(128\) must be 2N|^x: the last dimension must be contiguous"),
    (lambda: silu_mul_quantize(torch.zeros(128, 4, dtype=torch.bfloat16).t()[:, :64], "nvfp4"), ValueError,
     r"^x: the last dimension must be contiguous"),
    (lambda: silu_mul_quantize(X, "mxfp8", global_scale=torch.ones(1)), ValueError, r"^global_scale: only NVFP4"),
    (lambda: silu_mul_quantize(X, "nvfp4", global_scale=torch.ones(2)), ValueError, r"^global_scale: expected shape"),
    (lambda: silu_mul_quantize(X, "nvfp4", global_scale=torch.ones(1, dtype=torch.float64)), ValueError,
     r"^global_scale: expected dtype torch.float32"),
    (lambda: silu_mul_quantize(X, "nvfp4", global_scale=1.0), TypeError, r"^global_scale: expected a float32"),
    (lambda: silu_mul_quantize(X, "mxfp8", out=torch.empty(4)), TypeError, r"^out: expected a \(data, scale\)"),
    (lambda: silu_mul_quantize(X, "mxfp8", out=(torch.empty(4, 64, dtype=torch.uint8),
                                                 torch.empty(4, 3, dtype=torch.uint8))), ValueError,
     r"^out\[1\] \(scale\): expected shape \[4, 2\]"),
    (lambda: silu_mul_quantize(X, "mxfp8", out=(torch.empty(4, 32, dtype=torch.uint8),
                                                 torch.empty(4, 2, dtype=torch.uint8))), ValueError,
     r"^out\[0\] \(data\): expected shape \[4, 64\]"),
    (lambda: silu_mul_quantize(X, "mxfp8", out=(X.view(torch.uint8)[:, :64], torch.empty(4, 2, dtype=torch.uint8))),
     ValueError, r"^out\[0\] \(data\): expected a contiguous tensor"),
    (lambda: silu_mul_quantize(X, "mxfp8"), ValueError, r"^x: expected a CUDA tensor"),  # valid but on the CPU
])
def test_bad_argument_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_out_overlapping_x_is_refused():
    buf = torch.zeros(4 * 256, dtype=torch.uint8)
    x = buf[: 4 * 128 * 2].view(torch.bfloat16).view(4, 128)
    data = buf[:256].view(4, 64)
    with pytest.raises(ValueError, match=r"^out\[0\] \(data\): must not overlap x"):
        silu_mul_quantize(x, "mxfp8", out=(data, torch.empty(4, 2, dtype=torch.uint8)))


def test_output_shapes_of_leading_dimensions_and_swizzle():
    """Shapes are fixed before the device check: a CPU input of the right shape fails only there."""
    x = torch.zeros(2, 3, 64, dtype=torch.float16)  # M = 6, N = 32
    with pytest.raises(ValueError, match=r"^x: expected a CUDA tensor"):
        silu_mul_quantize(x, "nvfp4", layout="swizzled",
                          out=(torch.empty(2, 3, 16, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8)))
    with pytest.raises(ValueError, match=r"^out\[1\] \(scale\): expected shape \[128, 4\]"):
        silu_mul_quantize(x, "nvfp4", layout="swizzled",
                          out=(torch.empty(2, 3, 16, dtype=torch.uint8), torch.empty(6, 2, dtype=torch.uint8)))
