"""NVFP4 global-scale calibration on the device (no host sync, CUDA-graph safe)."""
from __future__ import annotations

import math

import torch

from . import checks

FLT_MAX = 3.4028234663852886e38  # largest finite fp32 (the references import it from here)


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """NVFP4 calibration: `448 * 6 / amax(|x|)` as a float32 tensor of shape [1] on x's device.

    Always finite and positive: amax == 0 (or empty x), and an x holding Inf or NaN, give 1.0;
    a tiny amax whose quotient overflows gives FLT_MAX (`global_scale_of_amax`).
    Computed on the device without a host sync (CUDA-graph safe).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in checks.DTYPES:
        raise ValueError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    amax = x.detach().abs().amax().float().reshape(1) if x.numel() else torch.zeros(1, device=x.device)
    return global_scale_of_amax(amax)


def global_scale_of_amax(amax: torch.Tensor) -> torch.Tensor:
    """NVFP4 calibration of fp32 amaxes, element-wise on their device (no sync): `448*6 / amax`
    capped at FLT_MAX for a finite amax > 0, and 1.0 for amax 0, +Inf or NaN (docs/numerics.md; the
    references in kernelforge/testing/references.py use this same function, which the runtime
    imports without them).

    Always finite and positive: 0 (from Inf) would zero every block and NaN would poison every
    one, while with 1.0 only the non-finite blocks (scale byte 0x7F whatever g is) are lost.
    """
    g = torch.clamp_max(_f32(448.0 * 6.0, amax.device) / amax, FLT_MAX)
    usable = (amax > 0) & (amax < math.inf)  # False for NaN
    return torch.where(usable, g, _f32(1.0, amax.device))


def _f32(value: float, device: torch.device) -> torch.Tensor:
    """A python float rounded once to an fp32 scalar tensor (fp32(1/6) etc.; the references use it too)."""
    return torch.tensor(value, dtype=torch.float32, device=device)
