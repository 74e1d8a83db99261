"""Pure-torch reference of `rmsnorm_quantize` (docs/numerics.md): RMSNorm, optionally after a residual add;
the quantization is `kernelforge.testing.quantize_ref` of its output."""
from __future__ import annotations

import torch


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-row fp32 x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), rounded to x.dtype."""
    xf = x.to(torch.float32)
    rstd = 1.0 / torch.sqrt((xf * xf).mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight.to(torch.float32)).to(x.dtype)


def add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, y): h = dtype(x + residual) (fp32 sum, one rounding), y = rmsnorm_ref(h, weight)."""
    h = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    return h, rmsnorm_ref(h, weight, eps)
