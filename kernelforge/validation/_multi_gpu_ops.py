"""Every public op on one device, for the multi-GPU tests (test_multi_gpu.py and the fresh
subprocesses it starts): inputs made once on the CPU from a seed and copied to a device, and
one call of each op on them, returned as raw bytes to compare across devices."""
from __future__ import annotations

from typing import Callable

import torch

import kernelforge

M, K = 256, 512  # x [M, K]; M and K multiples of 128 and 64: every op (RHT, columnwise) accepts it
E, N = 4, 128  # experts w [E, N, K]
OFFSETS = [100, 100, 256]  # quantize_grouped: 3 groups, one empty


def cpu_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    return {
        "x": x,
        "residual": torch.randn(M, K, generator=gen).to(torch.bfloat16),
        "weight": (torch.rand(K, generator=gen) + 0.5).to(torch.bfloat16),
        "w": torch.randn(E, N, K, generator=gen).to(torch.bfloat16),
        "offsets": torch.tensor(OFFSETS, dtype=torch.int32),
        "g": torch.tensor([448.0 * 6.0 / float(x.float().abs().max())]),
        "g_experts": torch.rand(E, generator=gen) * 100 + 1,
    }


def to_device(inp: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in inp.items()}


def _add_rmsnorm(i):
    r = i["residual"].clone()  # overwritten with x + residual: part of the result
    d, s = kernelforge.add_rmsnorm_quantize(i["x"], r, i["weight"], "nvfp4", layout="swizzled", global_scale=i["g"])
    return d, s, r


# name -> one call on the inputs of one device (all on that device); returns the output tensors.
OPS: dict[str, Callable[[dict], tuple]] = {
    "quantize_nvfp4": lambda i: kernelforge.quantize(i["x"], "nvfp4", layout="swizzled", global_scale=i["g"]),
    "quantize_nvfp4_default_scale": lambda i: kernelforge.quantize(i["x"], "nvfp4"),  # the per-device cached [1.0]
    "quantize_mxfp8_rceil": lambda i: kernelforge.quantize(i["x"], "mxfp8", scale_mode="rceil"),
    "quantize_mxfp4": lambda i: kernelforge.quantize(i["x"], "mxfp4", layout="swizzled"),
    "columnwise_nvfp4": lambda i: kernelforge.quantize(i["x"], "nvfp4", rowwise=False, columnwise=True,
                                                       global_scale=i["g"], layout="swizzled"),
    "dual_mxfp8": lambda i: kernelforge.quantize(i["x"], "mxfp8", rowwise=True, columnwise=True),
    "rht": lambda i: kernelforge.quantize_nvfp4_rht(i["x"], global_scale_row=i["g"], global_scale_col=i["g"]),
    "rht_default_scales": lambda i: kernelforge.quantize_nvfp4_rht(i["x"]),
    "rmsnorm_mxfp8": lambda i: kernelforge.rmsnorm_quantize(i["x"], i["weight"], "mxfp8", scale_mode="rceil"),
    "add_rmsnorm_nvfp4": _add_rmsnorm,
    "experts_nvfp4": lambda i: kernelforge.quantize_experts(i["w"], "nvfp4", global_scale=i["g_experts"]),
    "experts_mxfp8": lambda i: kernelforge.quantize_experts(i["w"], "mxfp8"),
    "grouped_nvfp4": lambda i: kernelforge.quantize_grouped(i["x"], i["offsets"], "nvfp4", global_scale=i["g"]),
    "nvfp4_global_scale": lambda i: (kernelforge.nvfp4_global_scale(i["x"]),),
    "rht_global_scale": lambda i: (kernelforge.rht_global_scale(i["x"]),),
}


def as_bytes(outs: tuple) -> list[torch.Tensor]:
    """The outputs' bytes on the CPU (after a sync of their devices)."""
    return [o.contiguous().view(torch.uint8).cpu() for o in outs]


def run_all(inp: dict[str, torch.Tensor], ops=OPS) -> dict[str, list[torch.Tensor]]:
    """Every op of `ops` on `inp` (one device), outputs as CPU bytes."""
    return {name: as_bytes(fn(inp)) for name, fn in ops.items()}


def diff(got: dict[str, list[torch.Tensor]], want: dict[str, list[torch.Tensor]]) -> list[str]:
    """The ops whose bytes differ (empty when equal)."""
    bad = []
    for name, outs in want.items():
        g = got[name]
        if len(g) != len(outs) or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(g, outs)):
            bad.append(name)
    return bad
