"""silu_mul_quantize on a GPU: kernel time from CUDA-graph replays over inputs rotated beyond L2,
GB/s and % of the device-to-device copy bandwidth measured in the same run.

Bytes = x read (M x 2N x 2) + data written (M x N x bits/8) + scales written. Prints a markdown
table; --json FILE writes the numbers. --baseline also times torch's unfused `F.silu(g) * u`
(no quantization at all) the same way, for scale.

Run from the repository root with the example's variants in the cache:
    KERNELFORGE_CACHE_DIR=<cache> PYTHONPATH=examples/kernelforge-silu-quant:. \
        python examples/kernelforge-silu-quant/benchmarks/bench_silu_quant.py
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))  # the package, when not installed
REPO = HERE.parents[3]
_spec = importlib.util.spec_from_file_location("_kf_timing", REPO / "benchmarks" / "_timing.py")
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)  # kernelforge's benchmark timing helpers (CUDA events, graphs, copy)

from kf_silu_quant.family import ensure_registered  # noqa: E402

SHAPES = [(16384, 4096), (16384, 7168), (16384, 14336), (4096, 7168)]
CASES = [("mxfp8", "floor"), ("mxfp8", "rceil"), ("nvfp4", "none")]
BITS = {"mxfp8": (32, 8), "nvfp4": (16, 4)}


def case_bytes(fmt: str, m: int, n: int, layout: str) -> int:
    b, bits = BITS[fmt]
    kb = n // b
    s = m * kb if layout == "linear" else -(-m // 128) * 128 * (-(-kb // 4) * 4)
    return m * 2 * n * 2 + m * n * bits // 8 + s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--layouts", default="linear,swizzled")
    ap.add_argument("--baseline", action="store_true", help="also time torch's unfused F.silu(g) * u")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_silu_quant: needs a CUDA GPU")
    ensure_registered()
    from kf_silu_quant.ops import silu_mul_quantize

    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name()
    copy_gbs = timing.copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s (2 GiB device-to-device, read + write)")
    print("| format | mode | layout | M | N | us | GB/s | % of copy |\n|---|---|---|---|---|---|---|---|")
    rows = []
    for m, n in SHAPES:
        xs = timing.rotating_inputs(m, 2 * n, dtype)
        for (fmt, mode), layout in itertools.product(CASES, args.layouts.split(",")):
            kw = {"layout": layout, **({"scale_mode": mode} if mode != "none" else {})}
            if fmt == "nvfp4":
                kw["global_scale"] = torch.ones(1, dtype=torch.float32, device="cuda")
            out = silu_mul_quantize(xs[0], fmt, **kw)
            it = itertools.count()
            us = timing.graph_us(lambda: silu_mul_quantize(xs[next(it) % len(xs)], fmt, out=out, **kw))
            nbytes = case_bytes(fmt, m, n, layout)
            row = {"device": name, "format": fmt, "mode": mode, "layout": layout, "dtype": args.dtype, "M": m,
                   "N": n, "us": us, "GBps": nbytes / us / 1e3, "pct_copy": 100 * nbytes / us / 1e3 / copy_gbs}
            rows.append(row)
            print(f"| {fmt} | {mode} | {layout} | {m} | {n} | {us:.1f} | {row['GBps']:.0f} | {row['pct_copy']:.1f} |",
                  flush=True)
        if args.baseline:
            it = itertools.count()

            def unfused(xs=xs, n=n, it=it):
                x = xs[next(it) % len(xs)]
                return torch.nn.functional.silu(x[:, :n]) * x[:, n:]

            us = timing.graph_us(unfused)
            nbytes = m * 2 * n * 2 + m * n * 2
            print(f"| torch F.silu(g)*u (unfused, no quantize) | | | {m} | {n} | {us:.1f} | {nbytes / us / 1e3:.0f} | "
                  f"{100 * nbytes / us / 1e3 / copy_gbs:.1f} |", flush=True)
        xs = out = None  # free before the next shape
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_GBps": copy_gbs, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
