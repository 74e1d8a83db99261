"""Fused RMSNorm+quantize benchmark on a GPU.

For M x H over the issue's grid: GPU time of the fused kernel (CUDA-graph replay, inputs rotated
through more than 4x L2), GB/s (bytes read + written) and % of the copy bandwidth measured in
the same run, versus (a) the unfused path (torch RMSNorm in eager, then kernelforge.quantize)
and (b) torch.compile of the reference rmsnorm + quantize (both also timed by graph replay).
The NVFP4 global scale is calibrated on the normalized output, the tensor being quantized.
Also the host cost per call: the loaded kernel (its launcher), the Python function and the
torch.library custom op. Prints a markdown table; --json writes every number.

Run from a checkout on a GPU machine with the cache built: `PYTHONPATH=. python benchmarks/bench_fused.py`.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

import kernelforge
import kernelforge.ops  # noqa: F401
from _timing import L2_BYTES, bench_us, copy_bandwidth, graph_us, host_us
from kernelforge.families.rmsnorm_quantize.reference import add_rmsnorm_ref, rmsnorm_ref
from kernelforge.formats import FORMATS
from kernelforge.testing.references import quantize_ref

M_VALUES = (1024, 4096, 16384, 65536)
H_VALUES = (1536, 4096, 8192, 16384, 32768)
CASES = [("rmsnorm", "nvfp4", "none"), ("rmsnorm", "mxfp8", "floor"), ("rmsnorm", "mxfp4", "floor"),
         ("add_rmsnorm", "nvfp4", "none")]
LAYOUT = "swizzled"  # what block-scaled GEMMs consume


def fused_bytes(op: str, fmt: str, m: int, h: int) -> int:
    f = FORMATS[fmt]
    kb = h // f.block
    scales = -(-m // 128) * 128 * (-(-kb // 4) * 4)
    io = m * h * 2 * (3 if op == "add_rmsnorm" else 1)  # x (+ residual read and written)
    return io + h * 2 + m * h * f.element_bits // 8 + scales


def _mode_kw(mode: str) -> dict:
    return {"scale_mode": mode} if mode != "none" else {}


def _calibrated_scale(op: str, x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """NVFP4 global scale calibrated on the tensor that is quantized: the normalized output.

    (Calibrating on x instead saturates the scale of every block whose
    amax exceeds amax(x), a few percent of blocks with random weights, which a calibrated
    pipeline never does; it cost the fused NVFP4 kernel up to 5% at H = 1536.)
    """
    h = x.shape[-1]
    y = torch.nn.functional.rms_norm(x + r if op == "add_rmsnorm" else x, (h,), w, 1e-6)
    return kernelforge.nvfp4_global_scale(y)


def _timed(fn) -> tuple[float | None, str]:
    """GPU time per call by CUDA-graph replay, else CUDA events; (None, error) if it cannot run."""
    try:
        return graph_us(fn, calls=5, replays=10), "graph"
    except Exception as exc:  # noqa: BLE001 - fall back and say so
        torch.cuda.synchronize()
        try:
            return bench_us(fn, iters=10, warmup=2), f"events ({type(exc).__name__} under capture)"
        except Exception as exc2:  # noqa: BLE001
            return None, f"{type(exc2).__name__}: {str(exc2)[:160]}"


def _refs() -> dict:
    """op -> (eager reference, torch.compile of it): pure torch, docs/numerics.md."""
    def ref_rms(x, w, g, fmt, mode):
        return quantize_ref(rmsnorm_ref(x, w), fmt, layout=LAYOUT, scale_mode=mode if mode != "none" else "floor",
                            global_scale=g)

    def ref_add(x, r, w, g, fmt, mode):
        h, y = add_rmsnorm_ref(x, r, w)
        return h, quantize_ref(y, fmt, layout=LAYOUT, scale_mode=mode if mode != "none" else "floor", global_scale=g)

    return {"rmsnorm": (ref_rms, torch.compile(ref_rms, dynamic=True)),
            "add_rmsnorm": (ref_add, torch.compile(ref_add, dynamic=True))}


def _cases(m_values, h_values, refs: dict):
    """(m, h, op, fmt, mode, fused, unfused, [eager ref, compiled ref]) over the grid, inputs live."""
    for m in m_values:
        for h in h_values:
            n = max(1, min(16, math.ceil(4 * L2_BYTES / (m * h * 2))))
            xs = [torch.randn(m, h, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
            rs = [torch.randn(m, h, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
            w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
            for op, fmt, mode in CASES:
                g = _calibrated_scale(op, xs[0], rs[0], w) if FORMATS[fmt].has_global_scale else None
                kw = dict(layout=LAYOUT, global_scale=g, **_mode_kw(mode))
                it = iter(range(10**12))
                if op == "rmsnorm":
                    res = kernelforge.rmsnorm_quantize(xs[0], w, fmt, **kw)
                    fused = lambda: kernelforge.rmsnorm_quantize(xs[next(it) % n], w, fmt, out=res, **kw)  # noqa: E731

                    def unfused():
                        i = next(it) % n
                        y = torch.nn.functional.rms_norm(xs[i], (h,), w, 1e-6)
                        return kernelforge.quantize(y, fmt, out=res, **kw)

                    ref = [(lambda f=f: f(xs[next(it) % n], w, g, fmt, mode)) for f in refs.get(op, ())]
                else:
                    res = kernelforge.add_rmsnorm_quantize(xs[0], rs[0], w, fmt, **kw)

                    def fused():
                        i = next(it) % n
                        return kernelforge.add_rmsnorm_quantize(xs[i], rs[i], w, fmt, out=res, **kw)

                    def unfused():
                        i = next(it) % n
                        rs[i].add_(xs[i])
                        y = torch.nn.functional.rms_norm(rs[i], (h,), w, 1e-6)
                        return kernelforge.quantize(y, fmt, out=res, **kw)

                    ref = [(lambda f=f: f(xs[next(it) % n], rs[next(it) % n], w, g, fmt, mode))
                           for f in refs.get(op, ())]
                yield m, h, op, fmt, mode, fused, unfused, ref
            xs.clear()  # free this shape's inputs before the next shape allocates (the closures share the lists)
            rs.clear()
            torch.cuda.empty_cache()


def rows(copy_gbs: float, compile_ref: bool, m_values, h_values) -> list[dict]:
    """Kernel timings over the whole grid first, then the references in a second pass: the
    references' heavy, allocation-hungry runs measurably slowed kernels timed right after them."""
    out = []
    for m, h, op, fmt, mode, fused, unfused, _ in _cases(m_values, h_values, {}):
        us, _ = _timed(fused)
        un_us, un_how = _timed(unfused)
        nbytes = fused_bytes(op, fmt, m, h)
        row = {"op": op, "format": fmt, "mode": mode, "layout": LAYOUT, "M": m, "H": h, "us": us,
               "GBps": nbytes / us / 1e3, "pct_copy": 100 * nbytes / us / 1e3 / copy_gbs,
               "unfused_us": un_us, "unfused_timing": un_how,
               "speedup_vs_unfused": un_us / us if un_us else None,
               "ref_compiled_us": None, "speedup_vs_compiled_ref": None, "ref_timing": "skipped",
               "ref_eager_us": None, "speedup_vs_eager_ref": None}
        out.append(row)
        print(f"{op:11} {fmt:5} {m:6}x{h:<6} {us:9.1f} us {row['GBps']:6.0f} GB/s {row['pct_copy']:5.1f}%  "
              f"unfused {un_us or float('nan'):9.1f} us ({row['speedup_vs_unfused'] or float('nan'):.2f}x)", flush=True)
    if compile_ref:
        for row, (m, h, op, fmt, _mode, _, _, ref) in zip(out, _cases(m_values, h_values, _refs())):
            ref_us, row["ref_timing"] = _timed(ref[1])
            # The eager reference keeps several fp32 copies of x alive: skip it above 2^28 elements.
            eager_us, _ = _timed(ref[0]) if m * h <= 2**28 else (None, "skipped")
            torch.cuda.empty_cache()
            row.update(ref_compiled_us=ref_us, ref_eager_us=eager_us,
                       speedup_vs_compiled_ref=ref_us / row["us"] if ref_us else None,
                       speedup_vs_eager_ref=eager_us / row["us"] if eager_us else None)
            print(f"{op:11} {fmt:5} {m:6}x{h:<6} compiled ref {ref_us or float('nan'):9.1f} us, eager ref "
                  f"{eager_us or float('nan'):9.1f} us", flush=True)
    return out


def host_overhead() -> dict:
    """Per-call host time of the three ways to call rmsnorm_quantize (out= given where possible)."""
    from kernelforge.ops import launch

    x = torch.randn(128, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    res = kernelforge.rmsnorm_quantize(x, w, "mxfp8")
    q, s = res
    coords = (("dtype", "bfloat16"), ("format", "mxfp8"), ("layout", "linear"), ("residual", "none"),
              ("scale_mode", "floor"))
    fn = launch.kernel_for("rmsnorm_quantize", coords, 0, 1024, 32, x.data_ptr(), 2048, 128)
    op = torch.ops.kernelforge.rmsnorm_quantize
    r = {
        "direct_us": host_us(lambda: fn(x, None, w, q, s, None, 1e-6)),
        "python_out_us": host_us(lambda: kernelforge.rmsnorm_quantize(x, w, "mxfp8", out=res)),
        "python_alloc_us": host_us(lambda: kernelforge.rmsnorm_quantize(x, w, "mxfp8")),
        "custom_op_us": host_us(lambda: op(x, w, "mxfp8", 1e-6, "linear", "floor", None)),
    }
    print("host per call (rmsnorm_quantize, 128x1024): " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    return r


def markdown(res: dict) -> str:
    lines = [f"Device: {res['device']}; copy bandwidth {res['copy_GBps']:.0f} GB/s (read + write). "
             f"Layout {LAYOUT}, bf16 input. Times are GPU time per call from CUDA-graph replay "
             "(queue primed: the replay's launch latency is not counted).", "",
             "| op | format | M | H | fused us | GB/s | % copy | unfused us | x unfused | compiled ref us "
             "| x compiled |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        f = lambda v, p=1: "n/a" if v is None else f"{v:.{p}f}"  # noqa: E731
        lines.append(f"| {r['op']} | {r['format']} | {r['M']} | {r['H']} | {f(r['us'])} | {f(r['GBps'], 0)} | "
                     f"{f(r['pct_copy'])} | {f(r['unfused_us'])} | {f(r['speedup_vs_unfused'], 2)} | "
                     f"{f(r['ref_compiled_us'])} | {f(r['speedup_vs_compiled_ref'], 2)} |")
    return "\n".join(lines)


def summary(res: dict) -> dict:
    rws = res["rows"]
    sp = [r["speedup_vs_unfused"] for r in rws if r["speedup_vs_unfused"]]
    ref = [r["speedup_vs_compiled_ref"] for r in rws if r["speedup_vs_compiled_ref"]]
    big = [r["pct_copy"] for r in rws if r["M"] >= 16384]
    s = {"geomean_speedup_vs_unfused": math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None,
         "min_speedup_vs_compiled_ref": min(ref) if ref else None,
         "min_pct_copy_at_M_ge_16384": min(big) if big else None}
    print("summary: " + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} n/a" for k, v in s.items()), flush=True)
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--no-compile-ref", action="store_true")
    ap.add_argument("--m", type=int, nargs="*", default=list(M_VALUES))
    ap.add_argument("--h", type=int, nargs="*", default=list(H_VALUES))
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    res = {"device": name, "copy_GBps": copy_gbs, "host": host_overhead()}
    res["rows"] = rows(copy_gbs, not args.no_compile_ref, args.m, args.h)
    res["summary"] = summary(res)
    md = markdown(res)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(md + "\n")


if __name__ == "__main__":
    main()
