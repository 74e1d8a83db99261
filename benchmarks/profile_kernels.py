"""Launch a few kernelforge kernels once each inside NVTX ranges, for Nsight Compute.

    ncu --clock-control none --nvtx --nvtx-include "kf/" --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section Occupancy \
        PYTHONPATH=. python benchmarks/profile_kernels.py dual:nvfp4:16384:8192 rmsnorm:nvfp4:16384:1536

Each case is `kind:format:M:K` with kind one of row, col, dual, rht (`quantize_nvfp4_rht`, both
outputs; format nvfp4), rmsnorm, addrms (`add_rmsnorm_quantize`), or `grouped:format:T:K:G` (T rows
in G random uneven groups, `quantize_grouped`); inputs are random bf16, scales swizzled unless the
case ends in `@linear`.
Warm-up calls run outside the ranges, so only the measured launch is profiled.
"""
from __future__ import annotations

import sys

import torch

import kernelforge


def case_fn(spec: str):
    spec, _, layout = spec.partition("@")
    kind, fmt, m, k, *rest = spec.split(":")
    x = torch.randn(int(m), int(k), device="cuda", dtype=torch.bfloat16)
    a: dict = {"layout": layout or "swizzled"}
    if kind == "rht":  # global scales made outside the profiled range
        g = kernelforge.nvfp4_global_scale(x)
        return lambda: kernelforge.quantize_nvfp4_rht(x, global_scale_row=g, global_scale_col=g, **a)
    if fmt == "nvfp4":
        a["global_scale"] = kernelforge.nvfp4_global_scale(x)
    if kind == "grouped":
        g = int(rest[0])
        sizes = torch.multinomial(torch.ones(g), int(m), replacement=True).bincount(minlength=g)
        ends = sizes.cumsum(0).to(torch.int32).cuda()
        a.pop("layout")
        return lambda: kernelforge.quantize_grouped(x, ends, fmt, **a)
    if kind == "rmsnorm":
        w = torch.randn(int(k), device="cuda", dtype=torch.bfloat16)
        return lambda: kernelforge.rmsnorm_quantize(x, w, fmt, **a)
    if kind == "addrms":  # residual updated in place, as the op does
        w, r = torch.randn(int(k), device="cuda", dtype=torch.bfloat16), torch.randn_like(x)
        return lambda: kernelforge.add_rmsnorm_quantize(x, r, w, fmt, **a)
    opts = {"row": {}, "col": {"rowwise": False, "columnwise": True}, "dual": {"columnwise": True}}[kind]
    return lambda: kernelforge.quantize(x, fmt, **opts, **a)


def main(specs: list[str]) -> None:
    for spec in specs:
        fn = case_fn(spec)
        fn()
        torch.cuda.synchronize()
        print("profiling", spec, flush=True)
        torch.cuda.nvtx.range_push("kf")
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
