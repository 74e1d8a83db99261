"""`rmsnorm`: quack's RMSNorm forward (`quack.rmsnorm.rmsnorm`, no autograd) on the prebuilt kernels."""
from __future__ import annotations

from typing import Optional, Union

import torch

from kernelforge import extend as kf

from ..family import RMSNORM
from .common import check_input, check_same_device, float_name, kernel, output, rows, traced_into

Result = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


def rmsnorm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None, *,
            out_dtype: Optional[torch.dtype] = None, eps: float = 1e-6, prenorm: bool = False,
            out: Optional[torch.Tensor] = None, residual_out: Optional[torch.Tensor] = None) -> Result:
    """RMSNorm over the last dimension N, computed by quack's kernel: `h = x + residual` (when a
    residual is given; written to `residual_out`, of the residual's dtype), then
    `out = h / sqrt(mean(h^2) + eps) * weight`, in `out_dtype` (default x's dtype).

    x: [..., N] bfloat16 / float16 / float32 CUDA tensor, N a multiple of 8; weight [N] or None;
    residual of x's shape or None. Returns `out` (x's shape), or `(out, residual_out)` with
    `prenorm=True` (`residual_out` is x itself without a residual), as `quack.rmsnorm` does.
    `out=` / `residual_out=` write into caller buffers of exactly those shapes and dtypes.
    Under torch.compile this is the `kf_quack::rmsnorm` custom op.
    """
    if torch.compiler.is_compiling():
        normed, res_out = rmsnorm_op.custom(x, weight, residual, out_dtype, eps)
        normed = traced_into(out, normed)
        if residual is not None:
            res_out = traced_into(residual_out, res_out)
        return (normed, res_out if residual is not None else x) if prenorm else normed
    n = check_input(x)
    dtype = float_name(x, "x")
    if weight is not None and (weight.dim() != 1 or weight.shape[0] != n):
        raise ValueError(f"weight: expected shape [{n}] (N), got {list(weight.shape)}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual: expected x's shape {list(x.shape)}, got {list(residual.shape)}")
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"out_dtype: expected bfloat16, float16 or float32, got {out_dtype}")
    check_same_device(x, weight=weight, residual=residual, out=out, residual_out=residual_out)
    coords = {"dtype": dtype, "weight_dtype": "none" if weight is None else float_name(weight, "weight"),
              "out_dtype": str(out_dtype).removeprefix("torch."),
              "residual": "none" if residual is None else float_name(residual, "residual"), "n": n}
    x2 = rows(x, n)
    normed = output(out, "out", tuple(x.shape), out_dtype, x.device)
    res_out = None if residual is None else output(residual_out, "residual_out", tuple(x.shape), residual.dtype,
                                                   x.device)
    if x2.shape[0]:
        fn = kernel(RMSNORM, x2, **coords)
        fn(x2, None if weight is None else weight.contiguous(), None, None if residual is None else rows(residual, n),
           normed.view(-1, n), None if res_out is None else res_out.view(-1, n), None, None, eps)
    if not prenorm:
        return normed
    return normed, (x if res_out is None else res_out)


def _fake(x: torch.Tensor, weight: Optional[torch.Tensor], residual: Optional[torch.Tensor],
          out_dtype: Optional[torch.dtype], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    res_dtype = x.dtype if residual is None else residual.dtype
    return (x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype),
            x.new_empty(x.shape if residual is not None else (0,), dtype=res_dtype))


@kf.torch_op("kf_quack::rmsnorm", fake=_fake)
def rmsnorm_op(x: torch.Tensor, weight: Optional[torch.Tensor], residual: Optional[torch.Tensor],
               out_dtype: Optional[torch.dtype], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`rmsnorm` into fresh outputs: (out, residual_out), residual_out empty without a residual."""
    normed, res_out = rmsnorm(x, weight, residual, out_dtype=out_dtype, eps=eps, prenorm=True)
    return normed, (res_out if residual is not None else x.new_empty((0,)))
