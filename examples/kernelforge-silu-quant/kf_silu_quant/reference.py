"""Pure-torch reference of silu_mul_quantize (runs on the CPU or on the GPU; the test oracle).

h = dtype(silu(g) * u) with silu(g) = g / (1 + exp(-g)), computed in fp32 and rounded once to
x's dtype; then kernelforge's `quantize_ref` (docs/numerics.md). On a CUDA device this is bit for
bit what the kernel computes: torch's CUDA silu evaluates `x / (1 + expf(-x))` in fp32 with
CUDA's precise expf and IEEE division, exactly the kernel's operations (README "Numerics").
On the CPU, torch's exp may differ from CUDA's expf in the last fp32 place, so CPU results
are a faithful model of the numerics, not the GPU's bytes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelforge.testing import quantize_ref

HALF_DTYPES = (torch.bfloat16, torch.float16)


def split_gate_up(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, u) = (x[..., :N], x[..., N:]) of x [..., 2N]."""
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"x: expected a last dimension 2N (gate | up), got shape {list(x.shape)}")
    n = x.shape[-1] // 2
    return x[..., :n], x[..., n:]


def silu_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """h = dtype(silu(g) * u), silu and the product in fp32 (torch's F.silu on x's device)."""
    if x.dtype not in HALF_DTYPES:
        raise ValueError(f"x: expected dtype bfloat16 or float16, got {x.dtype}")
    g, u = split_gate_up(x)
    return (F.silu(g.float()) * u.float()).to(x.dtype)


def silu_mul_explicit_ref(x: torch.Tensor) -> torch.Tensor:
    """The same h written operation by operation: `g / (1 + exp(-g)) * u` in fp32, each op
    correctly rounded (torch.exp = CUDA's expf on a GPU). Equal to `silu_mul_ref` on a GPU;
    kept to tell an exp difference from a silu difference if a GPU test ever fails."""
    g, u = split_gate_up(x)
    gf = g.float()
    return ((gf / (1.0 + torch.exp(-gf))) * u.float()).to(x.dtype)


def silu_mul_quantize_ref(
    x: torch.Tensor,
    format: str,
    *,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: torch.Tensor | None = None,
    activation=silu_mul_ref,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(data uint8, scale uint8) of block-scaled quantization of h = silu_mul_ref(x) along N.

    data: [M, N] E4M3 bytes (mxfp8) or [M, N/2] packed E2M1 (nvfp4), M = the leading
    dimensions of x flattened; scale: [M, N/B] (linear) or [roundup(M,128), roundup(N/B,4)]
    (swizzled, padding 0). NVFP4's `global_scale` is the fp32 [1] encode scale (None: 1.0).
    """
    h = activation(x)
    return quantize_ref(h.reshape(-1, h.shape[-1]), format, layout=layout,
                        scale_mode="none" if format == "nvfp4" else scale_mode, global_scale=global_scale)
