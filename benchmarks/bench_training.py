"""Training-side quantization on the GPU: dual (rowwise + columnwise) versus two calls, NVFP4 with
the random Hadamard transform fused versus transform-then-quantize, grouped (MoE) quantization
versus a Python loop over the groups. GPU time per call from CUDA-graph replays over rotating
inputs (more than 4x L2), GB/s of the fused kernel's own traffic (every input read once, every
output written, from the sizes of the tensors passed and returned) and % of copy bandwidth.
The row functions take their shapes, layouts and baselines as arguments (benchmarks/run.py
calls them with its own).

    PYTHONPATH=. python benchmarks/bench_training.py [--json out.json] [--md out.md]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import kernelforge
from _timing import ROUNDS, copy_bandwidth, eager_event_us, graph_us, io_bytes, rotating_inputs
from kernelforge.families.quantize_columnwise.op import hadamard_columns
from kernelforge.families.quantize_columnwise.reference import rht_matrix

SHAPES = [(4096, 7168), (8192, 7168), (16384, 8192)]
CASES = [("mxfp8", "floor"), ("mxfp4", "floor"), ("nvfp4", "none")]
DUAL_TARGET = 1.4
EXPERTS = ((8, 4096, 7168), (64, 1536, 4096))  # (E, N, K) of quantize_experts
OFFSETS = ((16384, 7168, 8), (16384, 4096, 64))  # (T, K, G) of quantize_grouped
BASELINE_ROUNDS = {"calls": 5, "replays": 10}  # the unfused RHT baselines: 10-70x slower than the kernel


def kw(mode: str, layout: str = "swizzled") -> dict:
    return {"layout": layout, **({"scale_mode": mode} if mode != "none" else {})}


def timed(fn_of_x, xs, **rounds) -> float:
    """GPU time per call of fn_of_x over the rotating inputs xs (graph_us; `rounds`: calls, replays)."""
    it = iter(range(10**9))
    return graph_us(lambda: fn_of_x(xs[next(it) % len(xs)]), **rounds)


def dual_rows(copy_gbs: float, shapes=SHAPES, layouts=("swizzled",), cases=CASES) -> list[dict]:
    """Dual (one kernel, both outputs) against rowwise + columnwise-only calls, and columnwise-only
    alone ("columnwise_*"), per shape, format and scale layout."""
    rows = []
    for m, k in shapes:
        xs = rotating_inputs(m, k)
        for fmt, mode in cases:
            for layout in layouts:
                a = kw(mode, layout)
                g = kernelforge.nvfp4_global_scale(xs[0]) if fmt == "nvfp4" else None
                if g is not None:
                    a["global_scale"] = g
                out_d = kernelforge.quantize(xs[0], fmt, columnwise=True, **a)
                out_r = kernelforge.quantize(xs[0], fmt, **a)
                out_c = kernelforge.quantize(xs[0], fmt, rowwise=False, columnwise=True, **a)
                dual = timed(lambda x: kernelforge.quantize(x, fmt, columnwise=True, out=out_d, **a), xs)
                row_us = timed(lambda x: kernelforge.quantize(x, fmt, out=out_r, **a), xs)
                col_us = timed(lambda x: kernelforge.quantize(x, fmt, rowwise=False, columnwise=True, out=out_c, **a),
                               xs)
                two = timed(lambda x: (kernelforge.quantize(x, fmt, out=out_r, **a),
                                       kernelforge.quantize(x, fmt, rowwise=False, columnwise=True, out=out_c, **a)),
                            xs)
                nbytes = io_bytes(xs[0], out_d)
                col_bytes = io_bytes(xs[0], out_c)
                r = {"section": "dual", "format": fmt, "mode": mode, "layout": layout, "M": m, "K": k,
                     "dual_us": dual, "two_calls_us": two, "rowwise_us": row_us, "columnwise_us": col_us,
                     "speedup": two / dual, "bytes": nbytes, "GBps": nbytes / dual / 1e3,
                     "pct_copy": 100 * nbytes / dual / 1e3 / copy_gbs, "columnwise_bytes": col_bytes,
                     "columnwise_GBps": col_bytes / col_us / 1e3,
                     "columnwise_pct_copy": 100 * col_bytes / col_us / 1e3 / copy_gbs}
                rows.append(r)
                print(f"dual {fmt:6} {layout:8} {m:6}x{k:<5} dual {dual:7.1f} us ({r['pct_copy']:5.1f}% copy)  "
                      f"two calls {two:7.1f} us (row {row_us:.1f} + col {col_us:.1f}, col "
                      f"{r['columnwise_pct_copy']:.1f}%)  x{r['speedup']:.2f}", flush=True)
        del xs
    return rows


def matmul_hadamard(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """rht(x) [N, M] bf16 by one fp32 batched GEMM with R (cuBLAS, TF32 off) and a transposing copy:
    the fastest transform-then-quantize baseline found (the torch butterfly is ~20x slower)."""
    m, n = x.shape
    y = torch.matmul(r.t(), x.float().view(m // 16, 16, n))  # [M/16, 16, N]: y[c, j, n]
    return y.view(m, n).t().to(torch.bfloat16).contiguous()


def rht_rows(copy_gbs: float, shapes=SHAPES, layouts=("swizzled",), baselines=("gemm", "butterfly")) -> list[dict]:
    """quantize_nvfp4_rht (both outputs, and columnwise only) per shape and scale layout, against
    transform-then-quantize with the transform as a GEMM ("gemm") and as the torch butterfly
    ("butterfly"); the baselines are timed with fewer rounds (BASELINE_ROUNDS)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    r = rht_matrix(device="cuda").float()
    rows = []
    for m, k in shapes:
        xs = rotating_inputs(m, k)
        g_row = kernelforge.nvfp4_global_scale(xs[0])
        g_col = kernelforge.rht_global_scale(xs[0])
        if "gemm" in baselines:
            y_mm = matmul_hadamard(xs[0], r)
            assert (y_mm != hadamard_columns(xs[0])).float().mean() < 0.01  # the same transform
            del y_mm
        for layout in layouts:
            for rowwise in (True, False):
                out = kernelforge.quantize_nvfp4_rht(xs[0], global_scale_row=g_row if rowwise else None,
                                                     global_scale_col=g_col, rowwise=rowwise, layout=layout)
                fused = timed(lambda x: kernelforge.quantize_nvfp4_rht(
                    x, global_scale_row=g_row if rowwise else None, global_scale_col=g_col, rowwise=rowwise,
                    layout=layout, out=out), xs)
                out_r = kernelforge.quantize(xs[0], "nvfp4", global_scale=g_row, layout=layout)
                out_t = kernelforge.quantize(hadamard_columns(xs[0]), "nvfp4", global_scale=g_col, layout=layout)

                def unfused(x, transform):
                    if rowwise:
                        kernelforge.quantize(x, "nvfp4", global_scale=g_row, layout=layout, out=out_r)
                    kernelforge.quantize(transform(x), "nvfp4", global_scale=g_col, layout=layout, out=out_t)

                un_bfly = timed(lambda x: unfused(x, hadamard_columns), xs, **BASELINE_ROUNDS) \
                    if "butterfly" in baselines else None
                un = timed(lambda x: unfused(x, lambda v: matmul_hadamard(v, r)), xs, **BASELINE_ROUNDS) \
                    if "gemm" in baselines else None
                nbytes = io_bytes(xs[0], out)
                row = {"section": "rht", "format": "nvfp4", "layout": layout,
                       "outputs": "both" if rowwise else "columnwise", "M": m, "K": k, "fused_us": fused,
                       "unfused_us": un, "unfused_butterfly_us": un_bfly, "speedup": un / fused if un else None,
                       "bytes": nbytes, "GBps": nbytes / fused / 1e3, "pct_copy": 100 * nbytes / fused / 1e3 / copy_gbs}
                rows.append(row)
                print(f"rht  {row['outputs']:10} {layout:8} {m:6}x{k:<5} fused {fused:7.1f} us "
                      f"({row['pct_copy']:5.1f}% copy)"
                      + (f"  unfused {un:7.1f} us x{row['speedup']:.2f}" if un else "")
                      + (f"  (torch butterfly {un_bfly:.1f})" if un_bfly else ""), flush=True)
        del xs
    return rows


def grouped_row(kind: str, fmt: str, shape: str, one: float, loop: float, nbytes: int, copy_gbs: float,
                **extra) -> dict:
    """One result row of the grouped section (one launch vs the loop), printed as it is made."""
    r = {"section": "grouped", "kind": kind, "format": fmt, "shape": shape, **extra, "grouped_us": one,
         "loop_us": loop, "speedup": loop / one, "bytes": nbytes, "GBps": nbytes / one / 1e3,
         "pct_copy": 100 * nbytes / one / 1e3 / copy_gbs}
    print(f"grp  {kind} {fmt:6} {shape} one launch {one:7.1f} us ({r['pct_copy']:5.1f}% copy)"
          f"  loop {loop:7.1f} us  x{r['speedup']:.2f}", flush=True)
    return r


def loop_calls(groups: int) -> int:
    """Calls per CUDA graph for a loop over `groups` groups: at most about 1024 launches per graph."""
    return max(1, min(ROUNDS["calls"], 1024 // groups))


def grouped_rows(copy_gbs: float, experts=EXPERTS, offsets=OFFSETS, cases=CASES) -> list[dict]:
    """Experts [E, N, K] in one launch versus a loop of per-expert calls; activations [T, K]
    with uneven groups (random sizes, seeded) in one launch versus a loop over the groups' row
    slices. Both timed by CUDA-graph replay, so the loop is charged its GPU time only (its host
    time per call, several us per group, is not counted). Bytes: inputs (x, offsets) read and
    every output written (data, the whole scale buffer with its per-group padding rows, which
    the kernel zeroes, and scale_offsets)."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    for fmt, mode in cases:
        a = kw(mode)
        a.pop("layout")
        for e, n, k in experts:
            ws = [torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            out = kernelforge.quantize_experts(ws[0], fmt, **a)
            outs = [kernelforge.quantize(ws[0][i], fmt, layout="swizzled", **a) for i in range(e)]
            one = timed(lambda w: kernelforge.quantize_experts(w, fmt, out=out, **a), ws)
            loop = timed(lambda w: [kernelforge.quantize(w[i], fmt, layout="swizzled", out=outs[i], **a)
                                    for i in range(e)], ws, calls=loop_calls(e))
            rows.append(grouped_row("experts", fmt, f"{e}x{n}x{k}", one, loop, io_bytes(ws[0], out), copy_gbs,
                                    mode=mode, layout="swizzled", E=e, N=n, K=k))
            del ws
        for t, k, g in offsets:
            sizes = torch.multinomial(torch.ones(g), t, replacement=True, generator=gen).bincount(minlength=g)
            ends = sizes.cumsum(0)
            offs = ends.to(torch.int32).cuda()
            xs = rotating_inputs(t, k)
            out = kernelforge.quantize_grouped(xs[0], offs, fmt, **a)
            bounds = [0, *ends.tolist()]
            one = timed(lambda x: kernelforge.quantize_grouped(x, offs, fmt, out=out, **a), xs)
            # One eager call with out= given, event-timed on an idle queue: its host cost over `one`.
            eager = eager_event_us(lambda x: kernelforge.quantize_grouped(x, offs, fmt, out=out, **a), xs)
            outs = [kernelforge.quantize(xs[0][bounds[i]:bounds[i + 1]], fmt, layout="swizzled", **a) for i in range(g)]
            loop = timed(lambda x: [kernelforge.quantize(x[bounds[i]:bounds[i + 1]], fmt, layout="swizzled",
                                                         out=outs[i], **a) for i in range(g)], xs, calls=loop_calls(g))
            rows.append(grouped_row("offsets", fmt, f"{t}x{k} G={g}", one, loop, io_bytes(xs[0], offs, out), copy_gbs,
                                    mode=mode, layout="swizzled", T=t, K=k, G=g, eager_us=eager,
                                    eager_over_graph_us=eager - one))
            del xs
    return rows


def markdown(res: dict) -> str:
    lines = [f"Device: {res['device']}; copy bandwidth {res['copy_GBps']:.0f} GB/s. bf16 input; scale layout per row "
             "(grouped: swizzled).", ""]
    d = [r for r in res["rows"] if r["section"] == "dual"]
    if d:
        lines += ["| dual | layout | M x K | dual us | % copy | row + col calls us | rowwise us | columnwise us "
                  "| col-only % copy | speedup |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['format']} | {r.get('layout', 'swizzled')} | {r['M']}x{r['K']} | {r['dual_us']:.1f} "
                  f"| {r['pct_copy']:.1f} "
                  f"| {r['two_calls_us']:.1f} | {r['rowwise_us']:.1f} | {r['columnwise_us']:.1f} "
                  f"| {r['columnwise_pct_copy']:.1f} | {r['speedup']:.2f}x |"
                  for r in d]
        lines.append("")
    h = [r for r in res["rows"] if r["section"] == "rht"]
    if h:
        f = lambda v, p=1, x="": "n/a" if v is None else f"{v:.{p}f}{x}"  # noqa: E731
        lines += ["| NVFP4 RHT | outputs | M x N | fused us | % copy | unfused (GEMM transform) us | "
                  "unfused (torch butterfly) us | speedup |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r.get('layout', 'swizzled')} | {r['outputs']} | {r['M']}x{r['K']} | {r['fused_us']:.1f} | "
                  f"{r['pct_copy']:.1f} | {f(r['unfused_us'])} | {f(r['unfused_butterfly_us'])} | "
                  f"{f(r['speedup'], 2, 'x')} |" for r in h]
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
    ap.add_argument("--layouts", nargs="*", default=["swizzled"], help="scale layouts of the dual and RHT rows")
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for section, fn in (("dual", lambda c: dual_rows(c, layouts=args.layouts)),
                        ("rht", lambda c: rht_rows(c, layouts=args.layouts)), ("grouped", grouped_rows)):
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
