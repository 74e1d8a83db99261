"""Would linear scales be cheaper as swizzled scales plus a layout pass? GPU time, 16384x8192.

    PYTHONPATH=. python benchmarks/diag_dual_unswizzle.py

For each format, CUDA-graph replay (as benchmarks/run.py times it): the dual and columnwise-only
calls with linear scales, the same calls with swizzled scales, and the swizzled calls followed by
a torch copy that rewrites their scales in the linear layout (128x4 chunks are 4-byte words:
a permuted int32 copy). Checks that the rewritten scales equal the linear call's, byte for byte.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernelforge  # noqa: E402
from _timing import copy_bandwidth, graph_us, io_bytes, rotating_inputs  # noqa: E402


def unswizzle_into(dst: torch.Tensor, sw: torch.Tensor) -> None:
    """Linear [M, C] scales (M % 128 == 0, C % 4 == 0) from the 128x4 swizzled layout."""
    m, c = dst.shape
    a, b = m // 128, c // 4
    src = sw.view(torch.uint8).view(torch.int32).view(a, b, 32, 4).permute(0, 3, 2, 1)
    dst.view(torch.uint8).view(torch.int32).view(a, 4, 32, b).copy_(src)


def main() -> None:
    m, k = 16384, 8192
    bw = copy_bandwidth()
    xs = rotating_inputs(m, k)
    print(f"{torch.cuda.get_device_name()}, copy {bw:.0f} GB/s, {m}x{k}")
    for fmt in ("mxfp8", "mxfp4", "nvfp4"):
        g = torch.ones(1, device="cuda") if fmt == "nvfp4" else None
        for rowwise in (True, False):
            kw = dict(columnwise=True, rowwise=rowwise, global_scale=g)
            lin = kernelforge.quantize(xs[0], fmt, layout="linear", **kw)
            sw = kernelforge.quantize(xs[0], fmt, layout="swizzled", **kw)
            outs = [torch.empty_like(t) for t in lin]
            scale_pairs = [(1, 1), (3, 3)] if rowwise else [(1, 1)]

            def conv() -> None:
                for i, j in scale_pairs:
                    unswizzle_into(outs[i], sw[j])

            conv()
            same = all(torch.equal(outs[i].view(torch.uint8), lin[i].view(torch.uint8)) for i, _ in scale_pairs)
            it = iter(range(10**9))
            t_lin = graph_us(lambda: kernelforge.quantize(xs[next(it) % len(xs)], fmt, layout="linear", out=lin, **kw))
            t_sw = graph_us(lambda: kernelforge.quantize(xs[next(it) % len(xs)], fmt, layout="swizzled", out=sw, **kw))
            t_conv = graph_us(conv)
            nbytes = io_bytes(xs[0], lin)
            pct = lambda us: 100 * nbytes / us / 1e3 / bw  # noqa: E731
            what = "dual" if rowwise else "columnwise-only"
            print(f"{fmt} {what:15s} linear {t_lin:7.1f} us ({pct(t_lin):5.1f}%)  swizzled {t_sw:7.1f} us  "
                  f"layout pass {t_conv:5.1f} us  swizzled+pass {t_sw + t_conv:7.1f} us ({pct(t_sw + t_conv):5.1f}%)  "
                  f"scales equal: {same}")


if __name__ == "__main__":
    main()
