"""Host cost per call of quantize and rmsnorm_quantize with out= versus the loaded function called directly.

Both paths call the very build the ops resolve to (the fast-path memo's function), in three
interleaved rounds; the minimum of each path is reported, so a noisy host affects both alike.
Run on a GPU machine from a checkout with the cache built: `PYTHONPATH=. python benchmarks/host_overhead.py`.
"""
from __future__ import annotations

import torch

import kernelforge
from _timing import host_us
from kernelforge.ops import fast_path


def measure(paths: dict, rounds: int = 3) -> dict:
    best: dict = {}
    for _ in range(rounds):
        for name, f in paths.items():
            best[name] = min(best.get(name, float("inf")), host_us(f))
    return best


def main() -> None:
    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    print(f"device: {torch.cuda.get_device_name()}; 128 x 256 bf16, us per call (best of {3} rounds)")
    for fmt in ("mxfp8", "nvfp4"):
        g = kernelforge.nvfp4_global_scale(x) if fmt == "nvfp4" else None
        for op in ("quantize", "rmsnorm_quantize"):
            if op == "quantize":
                out = kernelforge.quantize(x, fmt, global_scale=g)
                call = lambda: kernelforge.quantize(x, fmt, out=out, global_scale=g)  # noqa: E731
                alloc = lambda: kernelforge.quantize(x, fmt, global_scale=g)  # noqa: E731
            else:
                out = kernelforge.rmsnorm_quantize(x, w, fmt, global_scale=g)
                call = lambda: kernelforge.rmsnorm_quantize(x, w, fmt, out=out, global_scale=g)  # noqa: E731
                alloc = lambda: kernelforge.rmsnorm_quantize(x, w, fmt, global_scale=g)  # noqa: E731
            call()  # checked once, then remembered
            entry = list(fast_path.fast_calls.values())[-1]
            fn, g_arg = entry.fn, entry.arg
            direct = ((lambda: fn(x, out[0], out[1], g_arg)) if op == "quantize"
                      else (lambda: fn(x, None, w, out[0], out[1], g_arg, 1e-6)))
            r = measure({"direct": direct, "out=": call, "allocating": alloc})
            print(f"{op:17} {fmt}: direct {r['direct']:.2f}, out= {r['out=']:.2f} (+{r['out='] - r['direct']:.2f}), "
                  f"allocating {r['allocating']:.2f}", flush=True)


if __name__ == "__main__":
    main()
