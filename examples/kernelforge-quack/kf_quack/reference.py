"""Pure-torch references of the three ops (CPU or GPU), in fp32: what quack's kernels compute, up to
the order of their fp32 reductions and their fast reciprocal and exp2 approximations. The GPU
tests hold the kernels to quack's own path bit for bit; these references check that both agree
with the math within a tolerance, and document it."""
from __future__ import annotations

from typing import Optional

import torch


def rmsnorm_ref(x: torch.Tensor, weight: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None,
                eps: float = 1e-6, out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, residual_out): h = x + residual in fp32 (x without a residual), out = h / sqrt(mean(h^2)
    + eps) * weight in fp32, rounded to out_dtype (default x's dtype); residual_out is h rounded to
    the residual's dtype (x itself without a residual)."""
    h = x.float() if residual is None else x.float() + residual.float()
    y = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(out_dtype or x.dtype), (x if residual is None else h.to(residual.dtype))


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension in fp32, rounded to x's dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def cross_entropy_ref(x: torch.Tensor, target: torch.Tensor, ignore_index: int = -100
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, lse), fp32 [M]: lse = logsumexp(x) per row, loss = lse - x[target] (0 where target ==
    ignore_index)."""
    xf = x.float()
    lse = torch.logsumexp(xf, dim=-1)
    keep = target != ignore_index
    picked = xf.gather(1, torch.where(keep, target, 0).long()[:, None])[:, 0]
    return torch.where(keep, lse - picked, torch.zeros_like(lse)), lse
