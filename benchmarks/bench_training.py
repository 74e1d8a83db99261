"""Training-side quantization on the GPU: dual (rowwise + columnwise) versus two calls, NVFP4 with
the random Hadamard transform fused versus transform-then-quantize, grouped (MoE) quantization
versus a Python loop over the groups. GPU time per call from CUDA-graph replays over rotating
inputs (more than 4x L2), GB/s of the fused kernel's own traffic and % of copy bandwidth.

    PYTHONPATH=. python benchmarks/bench_training.py [--json out.json] [--md out.md]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import kernelforge
from _timing import copy_bandwidth, graph_us, rotating_inputs
from kernelforge.formats import FORMATS
from kernelforge.ops.quantize_columnwise import hadamard_columns
from kernelforge.ops.reference import rht_matrix

SHAPES = [(4096, 7168), (8192, 7168), (16384, 8192)]
CASES = [("mxfp8", "floor"), ("mxfp4", "floor"), ("nvfp4", "none")]
DUAL_TARGET = 1.4


def kw(mode: str) -> dict:
    return {"layout": "swizzled", **({"scale_mode": mode} if mode != "none" else {})}


def scale_bytes(rows: int, blocks: int) -> int:
    return -(-rows // 128) * 128 * (-(-blocks // 4) * 4)


def one_side_bytes(fmt: str, m: int, k: int) -> int:
    """Output bytes of one quantized side (data + swizzled scales) of an [m, k] input."""
    f = FORMATS[fmt]
    return m * k * f.element_bits // 8 + scale_bytes(m, k // f.block)


def timed(fn_of_x, xs) -> float:
    it = iter(range(10**9))
    return graph_us(lambda: fn_of_x(xs[next(it) % len(xs)]))


def dual_rows(copy_gbs: float) -> list[dict]:
    rows = []
    for m, k in SHAPES:
        xs = rotating_inputs(m, k)
        for fmt, mode in CASES:
            a = kw(mode)
            g = kernelforge.nvfp4_global_scale(xs[0]) if fmt == "nvfp4" else None
            if g is not None:
                a["global_scale"] = g
            out_d = kernelforge.quantize(xs[0], fmt, columnwise=True, **a)
            out_r = kernelforge.quantize(xs[0], fmt, **a)
            out_c = kernelforge.quantize(xs[0], fmt, rowwise=False, columnwise=True, **a)
            dual = timed(lambda x: kernelforge.quantize(x, fmt, columnwise=True, out=out_d, **a), xs)
            row_us = timed(lambda x: kernelforge.quantize(x, fmt, out=out_r, **a), xs)
            col_us = timed(lambda x: kernelforge.quantize(x, fmt, rowwise=False, columnwise=True, out=out_c, **a), xs)
            two = timed(lambda x: (kernelforge.quantize(x, fmt, out=out_r, **a),
                                   kernelforge.quantize(x, fmt, rowwise=False, columnwise=True, out=out_c, **a)), xs)
            side = one_side_bytes(fmt, m, k)
            nbytes = 2 * m * k + 2 * side
            col_bytes = 2 * m * k + side
            r = {"section": "dual", "format": fmt, "M": m, "K": k, "dual_us": dual, "two_calls_us": two,
                 "rowwise_us": row_us, "columnwise_us": col_us, "speedup": two / dual,
                 "GBps": nbytes / dual / 1e3, "pct_copy": 100 * nbytes / dual / 1e3 / copy_gbs,
                 "columnwise_pct_copy": 100 * col_bytes / col_us / 1e3 / copy_gbs}
            rows.append(r)
            print(f"dual {fmt:6} {m:6}x{k:<5} dual {dual:7.1f} us ({r['pct_copy']:5.1f}% copy)  two calls {two:7.1f} us"
                  f" (row {row_us:.1f} + col {col_us:.1f}, col {r['columnwise_pct_copy']:.1f}%)  x{r['speedup']:.2f}",
                  flush=True)
        del xs
    return rows


def matmul_hadamard(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """rht(x) [N, M] bf16 by one fp32 batched GEMM with R (cuBLAS, TF32 off) and a transposing copy:
    the fastest transform-then-quantize baseline found (the torch butterfly is ~20x slower)."""
    m, n = x.shape
    y = torch.matmul(r.t(), x.float().view(m // 16, 16, n))  # [M/16, 16, N]: y[c, j, n]
    return y.view(m, n).t().to(torch.bfloat16).contiguous()


def rht_rows(copy_gbs: float) -> list[dict]:
    torch.backends.cuda.matmul.allow_tf32 = False
    r = rht_matrix(device="cuda").float()
    rows = []
    for m, k in SHAPES:
        xs = rotating_inputs(m, k)
        g_row = kernelforge.nvfp4_global_scale(xs[0])
        g_col = kernelforge.rht_global_scale(xs[0])
        for rowwise in (True, False):
            out = kernelforge.quantize_nvfp4_rht(xs[0], global_scale_row=g_row if rowwise else None,
                                                 global_scale_col=g_col, rowwise=rowwise)
            fused = timed(lambda x: kernelforge.quantize_nvfp4_rht(
                x, global_scale_row=g_row if rowwise else None, global_scale_col=g_col, rowwise=rowwise, out=out), xs)
            out_r = kernelforge.quantize(xs[0], "nvfp4", global_scale=g_row, layout="swizzled")
            out_t = kernelforge.quantize(hadamard_columns(xs[0]), "nvfp4", global_scale=g_col, layout="swizzled")
            y_mm = matmul_hadamard(xs[0], r)
            assert (y_mm != hadamard_columns(xs[0])).float().mean() < 0.01  # the same transform

            def unfused(x, transform):
                if rowwise:
                    kernelforge.quantize(x, "nvfp4", global_scale=g_row, layout="swizzled", out=out_r)
                kernelforge.quantize(transform(x), "nvfp4", global_scale=g_col, layout="swizzled", out=out_t)

            un_bfly = timed(lambda x: unfused(x, hadamard_columns), xs)
            un = timed(lambda x: unfused(x, lambda v: matmul_hadamard(v, r)), xs)
            side = one_side_bytes("nvfp4", m, k)
            nbytes = 2 * m * k + side * (2 if rowwise else 1)
            row = {"section": "rht", "outputs": "both" if rowwise else "columnwise", "M": m, "K": k,
                   "fused_us": fused, "unfused_us": un, "unfused_butterfly_us": un_bfly, "speedup": un / fused,
                   "GBps": nbytes / fused / 1e3, "pct_copy": 100 * nbytes / fused / 1e3 / copy_gbs}
            rows.append(row)
            print(f"rht  {row['outputs']:10} {m:6}x{k:<5} fused {fused:7.1f} us ({row['pct_copy']:5.1f}% copy)"
                  f"  unfused {un:7.1f} us (torch butterfly {un_bfly:.1f})  x{row['speedup']:.2f}", flush=True)
        del xs
    return rows


def grouped_row(kind: str, fmt: str, shape: str, one: float, loop: float, nbytes: int, copy_gbs: float) -> dict:
    """One result row of the grouped section (one launch vs the loop), printed as it is made."""
    r = {"section": "grouped", "kind": kind, "format": fmt, "shape": shape, "grouped_us": one, "loop_us": loop,
         "speedup": loop / one, "GBps": nbytes / one / 1e3, "pct_copy": 100 * nbytes / one / 1e3 / copy_gbs}
    print(f"grp  {kind} {fmt:6} {shape} one launch {one:7.1f} us ({r['pct_copy']:5.1f}% copy)"
          f"  loop {loop:7.1f} us  x{r['speedup']:.2f}", flush=True)
    return r


def grouped_rows(copy_gbs: float) -> list[dict]:
    """Experts [E, N, K] in one launch versus a loop of per-expert calls; activations [T, K]
    with uneven groups in one launch versus a loop over the groups' row slices."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    for fmt, mode in CASES:
        a = kw(mode)
        a.pop("layout")
        for e, n, k in ((8, 4096, 7168), (64, 1536, 4096)):
            ws = [torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            out = kernelforge.quantize_experts(ws[0], fmt, **a)
            outs = [kernelforge.quantize(ws[0][i], fmt, layout="swizzled", **a) for i in range(e)]
            one = timed(lambda w: kernelforge.quantize_experts(w, fmt, out=out, **a), ws)
            loop = timed(lambda w: [kernelforge.quantize(w[i], fmt, layout="swizzled", out=outs[i], **a)
                                    for i in range(e)], ws)
            rows.append(grouped_row("experts", fmt, f"{e}x{n}x{k}", one, loop,
                                    2 * e * n * k + e * one_side_bytes(fmt, n, k), copy_gbs))
            del ws
        for t, k, g in ((16384, 7168, 8), (16384, 4096, 64)):
            sizes = torch.multinomial(torch.ones(g), t, replacement=True, generator=gen).bincount(minlength=g)
            ends = sizes.cumsum(0)
            offsets = ends.to(torch.int32).cuda()
            xs = rotating_inputs(t, k)
            out = kernelforge.quantize_grouped(xs[0], offsets, fmt, **a)
            bounds = [0, *ends.tolist()]
            one = timed(lambda x: kernelforge.quantize_grouped(x, offsets, fmt, out=out, **a), xs)
            outs = [kernelforge.quantize(xs[0][bounds[i]:bounds[i + 1]], fmt, layout="swizzled", **a) for i in range(g)]
            loop = timed(lambda x: [kernelforge.quantize(x[bounds[i]:bounds[i + 1]], fmt, layout="swizzled",
                                                         out=outs[i], **a) for i in range(g)], xs)
            rows.append(grouped_row("offsets", fmt, f"{t}x{k} G={g}", one, loop,
                                    2 * t * k + one_side_bytes(fmt, t, k), copy_gbs))
            del xs
    return rows


def markdown(res: dict) -> str:
    lines = [f"Device: {res['device']}; copy bandwidth {res['copy_GBps']:.0f} GB/s. Swizzled scales, bf16 input.", ""]
    d = [r for r in res["rows"] if r["section"] == "dual"]
    if d:
        lines += ["| dual | M x K | dual us | % copy | row + col calls us | rowwise us | columnwise us "
                  "| col-only % copy | speedup |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['format']} | {r['M']}x{r['K']} | {r['dual_us']:.1f} | {r['pct_copy']:.1f} "
                  f"| {r['two_calls_us']:.1f} | {r['rowwise_us']:.1f} | {r['columnwise_us']:.1f} "
                  f"| {r['columnwise_pct_copy']:.1f} | {r['speedup']:.2f}x |"
                  for r in d]
        lines.append("")
    h = [r for r in res["rows"] if r["section"] == "rht"]
    if h:
        lines += ["| NVFP4 RHT | outputs | M x N | fused us | % copy | unfused (GEMM transform) us | "
                  "unfused (torch butterfly) us | speedup |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| | {r['outputs']} | {r['M']}x{r['K']} | {r['fused_us']:.1f} | {r['pct_copy']:.1f} | "
                  f"{r['unfused_us']:.1f} | {r['unfused_butterfly_us']:.1f} | {r['speedup']:.2f}x |" for r in h]
        lines.append("")
    g = [r for r in res["rows"] if r["section"] == "grouped"]
    if g:
        lines += ["| grouped | format | shape | one launch us | % copy | Python loop us | speedup |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['kind']} | {r['format']} | {r['shape']} | {r['grouped_us']:.1f} | {r['pct_copy']:.1f} | "
                  f"{r['loop_us']:.1f} | {r['speedup']:.2f}x |" for r in g]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--only", nargs="*", default=["dual", "rht", "grouped"])
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for section, fn in (("dual", dual_rows), ("rht", rht_rows), ("grouped", grouped_rows)):
        if section in args.only:
            rows += fn(copy_gbs)
    res = {"device": name, "copy_GBps": copy_gbs, "rows": rows}
    md = markdown(res)
    print(md)
    bad = [r for r in rows if r["section"] == "dual" and r["speedup"] < DUAL_TARGET]
    print(f"dual target (>= {DUAL_TARGET}x over two calls): " + ("met" if not bad else f"missed in {len(bad)} row(s)"))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.md:
        Path(args.md).write_text(md)


if __name__ == "__main__":
    main()
