"""`softmax`: quack's softmax forward (`quack.softmax.softmax`, no autograd) on the prebuilt kernels."""
from __future__ import annotations

from typing import Optional

import torch

from kernelforge import extend as kf

from ..family import SOFTMAX
from .common import check_input, float_name, kernel, output, rows, traced_into


def softmax(x: torch.Tensor, *, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Softmax over the last dimension N, computed by quack's kernel, in x's dtype.

    x: [..., N] bfloat16 / float16 / float32 CUDA tensor, N a multiple of 8. `out=` writes into a
    caller buffer of x's shape and dtype. Under torch.compile this is the `kf_quack::softmax`
    custom op.
    """
    if torch.compiler.is_compiling():
        return traced_into(out, softmax_op.custom(x))
    n = check_input(x)
    dtype = float_name(x, "x")
    x2 = rows(x, n)
    y = output(out, "out", tuple(x.shape), x.dtype, x.device)
    if x2.shape[0]:
        kernel(SOFTMAX, x2, dtype=dtype, n=n)(x2, y.view(-1, n))
    return y


def _fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@kf.torch_op("kf_quack::softmax", fake=_fake)
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """`softmax` into a fresh output."""
    return softmax(x)
