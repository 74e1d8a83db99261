"""NVFP4 global-scale calibration on the device (no host sync, CUDA-graph safe)."""
from __future__ import annotations

import torch

from . import _common as c
from .reference import global_scale_of_amax


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """NVFP4 calibration: `448 * 6 / amax(|x|)` as a float32 tensor of shape [1] on x's device.

    Always finite and positive: amax == 0 (or empty x), and an x holding Inf or NaN, give 1.0;
    a tiny amax whose quotient overflows gives FLT_MAX (`reference.global_scale_of_amax`).
    Computed on the device without a host sync (CUDA-graph safe).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in c.DTYPES:
        raise ValueError(f"x: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    amax = x.detach().abs().amax().float().reshape(1) if x.numel() else torch.zeros(1, device=x.device)
    return global_scale_of_amax(amax)
