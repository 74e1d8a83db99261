"""Linear scales of the columnwise op: the direct kernel against swizzled scales + the layout pass.

    PYTHONPATH=. python benchmarks/diag_dual_unswizzle.py [--torch-pass]

For each format, shape and output set (dual, columnwise-only), CUDA-graph replay (as
benchmarks/run.py times it): the call with linear scales through the direct kernel, the same
call through the staged path (`ops/scale_layout.py`: the swizzled kernel, then the pass
kernel), the swizzled call alone and the pass alone; both linear paths' outputs must be equal
byte for byte. The paths are forced through `kernelforge.staging.STAGED_MIN_ELEMENTS` (every format
and output set staged, or none); the shipped thresholds there come from this script's output.
`--torch-pass` also times a torch copy that permutes the swizzled scales (4-byte words), the
first measurement of this idea.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernelforge  # noqa: E402
from _timing import copy_bandwidth, graph_us, io_bytes, rotating_inputs, same_size_copy_us  # noqa: E402
from kernelforge import staging  # noqa: E402
from kernelforge.ops import scale_layout  # noqa: E402

SHAPES = ((4096, 7168), (8192, 7168), (16384, 8192))


def torch_unswizzle_into(dst: torch.Tensor, sw: torch.Tensor) -> None:
    """Linear [M, C] scales (M % 128 == 0, C % 4 == 0) from the 128x4 swizzled layout, with torch."""
    m, c = dst.shape
    a, b = m // 128, c // 4
    src = sw.view(torch.uint8).view(torch.int32).view(a, b, 32, 4).permute(0, 3, 2, 1)
    dst.view(torch.uint8).view(torch.int32).view(a, 4, 32, b).copy_(src)


RULE = dict(staging.STAGED_MIN_ELEMENTS)


def forced(staged: bool | None) -> None:
    """Every format and output set staged (True), none (False), or the shipped rule (None)."""
    pairs = [(f, o) for f in ("mxfp8", "mxfp4", "nvfp4") for o in ("dual", "columnwise")]
    staging.STAGED_MIN_ELEMENTS.clear()
    staging.STAGED_MIN_ELEMENTS.update(RULE if staged is None else {p: 0 for p in pairs} if staged else {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch-pass", action="store_true")
    args = ap.parse_args()
    bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}, copy {bw:.0f} GB/s")
    for m, k in SHAPES:
        xs = rotating_inputs(m, k)
        for fmt in ("mxfp8", "mxfp4", "nvfp4"):
            g = torch.ones(1, device="cuda") if fmt == "nvfp4" else None
            for rowwise in (True, False):
                kw = dict(columnwise=True, rowwise=rowwise, global_scale=g)
                it = iter(range(10**9))
                times, outs = {}, {}
                for name, staged in (("direct", False), ("staged", True)):
                    forced(staged)
                    outs[name] = kernelforge.quantize(xs[0], fmt, layout="linear", **kw)
                    buf = [torch.empty_like(t) for t in outs[name]]
                    times[name] = graph_us(lambda b=buf: kernelforge.quantize(
                        xs[next(it) % len(xs)], fmt, layout="linear", out=b, **kw))
                sw = kernelforge.quantize(xs[0], fmt, layout="swizzled", **kw)
                times["swizzled"] = graph_us(lambda: kernelforge.quantize(
                    xs[next(it) % len(xs)], fmt, layout="swizzled", out=sw, **kw))
                same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                           for a, b in zip(outs["direct"], outs["staged"]))
                nbytes = io_bytes(xs[0], outs["direct"])
                pct = lambda us: 100 * nbytes / us / 1e3 / bw  # noqa: E731
                what = "dual" if rowwise else "columnwise"
                pairs = [(sw[i], outs["staged"][i]) for i in ((1, 3) if rowwise else (1,))]
                fn = scale_layout.pass_kernel(pairs[0][1])
                words = [(s.view(torch.int32).view(-1), d.view(torch.int32)) for s, d in pairs]
                pass_args = (*words[0], *words[1]) if len(words) > 1 else (*words[0], words[0][0][:0],
                                                                            words[0][1][:0])
                t_alone = graph_us(lambda: fn(*pass_args))
                moved = 2 * sum(d.numel() * d.element_size() for _, d in pairs)
                line = (f"{fmt} {m}x{k} {what:10s} direct {times['direct']:7.1f} us ({pct(times['direct']):5.1f}%)  "
                        f"staged {times['staged']:7.1f} us ({pct(times['staged']):5.1f}%)  swizzled "
                        f"{times['swizzled']:7.1f} us  pass alone {t_alone:5.1f} us ({moved / t_alone / 1e3:.0f} GB/s, "
                        f"copy of as many bytes {same_size_copy_us(moved):5.1f} us)  equal: {same}")
                if args.torch_pass and m % 128 == 0:
                    lin = outs["direct"]
                    pairs = [(1, 1), (3, 3)] if rowwise else [(1, 1)]
                    tgt = [torch.empty_like(t) for t in lin]
                    t_pass = graph_us(lambda: [torch_unswizzle_into(tgt[i], sw[j]) for i, j in pairs])
                    line += f"  torch pass {t_pass:5.1f} us"
                print(line, flush=True)
    forced(None)


if __name__ == "__main__":
    main()
