"""Quantize benchmark on a GPU: kernel time (CUDA-graph replay, rotating inputs larger than L2), GB/s,
% of measured copy bandwidth, torch.compile of the reference, cold start and host overhead. Prints a markdown
table; --json writes all numbers.

Run from a checkout on a GPU machine with the cache built: `PYTHONPATH=. python benchmarks/bench_quantize.py`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import kernelforge
from _timing import L2_BYTES, bench_us, copy_bandwidth, graph_us, host_us, rotating_inputs, same_size_copy_us  # noqa: F401
from kernelforge.formats import FORMATS
from kernelforge.testing.references import quantize_ref

SHAPES = [(1024, 4096), (4096, 7168), (8192, 7168), (16384, 8192)]
CASES = [("mxfp8", "floor"), ("mxfp4", "floor"), ("nvfp4", "none")]


def kwargs(mode: str, layout: str) -> dict:
    return {"layout": layout, **({"scale_mode": mode} if mode != "none" else {})}


def case_bytes(fmt: str, m: int, k: int, layout: str) -> int:
    f = FORMATS[fmt]
    kb = k // f.block
    s = m * kb if layout == "linear" else -(-m // 128) * 128 * (-(-kb // 4) * 4)
    return m * k * 2 + m * k * f.element_bits // 8 + s


def kernel_rows(copy_gbs: float, with_refs: bool, shapes=SHAPES, cases=CASES,
                layouts=("linear", "swizzled")) -> list[dict]:
    """Every format, mode and layout over `shapes`; with_refs adds the eager and compiled references."""
    rows = []
    compiled: dict = {}
    copies: dict[int, float] = {}  # bytes moved -> same-size copy us
    for m, k in shapes:
        xs = rotating_inputs(m, k)
        for fmt, mode in cases:
            for layout in layouts:
                kw = kwargs(mode, layout)
                it = iter(range(10**9))
                out = kernelforge.quantize(xs[0], fmt, **kw)
                us = graph_us(lambda: kernelforge.quantize(xs[next(it) % len(xs)], fmt, out=out, **kw))
                nbytes = case_bytes(fmt, m, k, layout)
                if nbytes not in copies:
                    copies[nbytes] = same_size_copy_us(nbytes)
                    torch.cuda.empty_cache()
                row = {"format": fmt, "mode": mode, "layout": layout, "M": m, "K": k, "us": us,
                       "GBps": nbytes / us / 1e3, "pct_copy": 100 * nbytes / us / 1e3 / copy_gbs,
                       "same_size_copy_us": copies[nbytes], "pct_same_size_copy": 100 * copies[nbytes] / us}
                if with_refs:
                    def ref(x, fmt=fmt, mode=mode, layout=layout):
                        return quantize_ref(x, fmt, layout=layout, scale_mode=mode if mode != "none" else "floor")

                    key = (fmt, mode, layout)
                    compiled.setdefault(key, torch.compile(ref, dynamic=True))
                    for name, fn in (("compiled", compiled[key]), ("eager", ref)):
                        try:
                            it2 = iter(range(10**9))
                            row[f"ref_{name}_us"] = bench_us(lambda: fn(xs[next(it2) % len(xs)]), iters=10, warmup=2)
                            row[f"speedup_vs_{name}_ref"] = row[f"ref_{name}_us"] / us
                        except Exception as exc:  # report, do not hide
                            row[f"ref_{name}_us"] = None
                            row[f"ref_{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        torch.cuda.empty_cache()
                rows.append(row)
                print(f"{fmt:6} {layout:8} {m:6}x{k:<5} {us:8.1f} us {row['GBps']:7.0f} GB/s {row['pct_copy']:5.1f}%"
                      f" (same-size copy {copies[nbytes]:.1f} us)"
                      + (f"  compiled ref {row['ref_compiled_us']:.1f} us" if row.get("ref_compiled_us") else "")
                      + (f"  eager ref {row['ref_eager_us']:.1f} us" if row.get("ref_eager_us") else ""),
                      flush=True)
        xs.clear()  # free this shape's inputs (the timed closures share the list)
    return rows


COLD = r"""
import time, torch
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
kernelforge.quantize  # the ops (and tvm_ffi) load on first attribute access
t1 = time.perf_counter()
kernelforge.quantize(x, "{fmt}", layout="swizzled"); torch.cuda.synchronize()
t2 = time.perf_counter()
kernelforge.quantize(x, "{fmt}", layout="swizzled"); torch.cuda.synchronize()
t3 = time.perf_counter()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
"""


def cold_start() -> list[dict]:
    rows = []
    index = json.loads((Path(kernelforge.set_cache_root(None)) / "v1" / "index.json").read_text())["entries"]
    for fmt in FORMATS:
        outs = [subprocess.run([sys.executable, "-c", COLD.replace("{fmt}", fmt)], capture_output=True,
                               text=True, env=os.environ).stdout.split() for _ in range(5)]
        vals = sorted((float(o[1]), float(o[0]), float(o[2])) for o in outs if len(o) == 3)
        first, imp, second = vals[len(vals) // 2]
        compile_s = [e["build_time_s"] for e in index.values() if e.get("kind") == "kernel"
                     and e["name"].startswith(f"quantize.{fmt}.") and ".swizzled.bfloat16.aligned." in e["name"]]
        rows.append({"format": fmt, "import_ms": imp, "first_call_ms": first, "second_call_ms": second,
                     "dsl_compile_s": compile_s[0] if compile_s else None})
        print(f"cold start {fmt}: import kernelforge {imp:.2f} ms, first call {first:.2f} ms "
              f"(load + launch), second {second:.3f} ms; CuTe-DSL compile+link of it: "
              f"{compile_s[0] if compile_s else float('nan'):.2f} s", flush=True)
    return rows


def host_overhead() -> dict:
    """Per-call host time: kernelforge.quantize(out=...) vs calling the loaded function directly."""
    from kernelforge.ops import launch

    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    out = kernelforge.quantize(x, "mxfp8")
    q, s = out
    coords = (("dtype", "bfloat16"), ("format", "mxfp8"), ("layout", "linear"), ("scale_mode", "floor"))
    fn = launch.kernel_for("quantize", coords, 0, 256, 32, x.data_ptr(), 512, 128)  # what quantize() uses
    direct = host_us(lambda: fn(x, q, s, None))
    with_out = host_us(lambda: kernelforge.quantize(x, "mxfp8", out=out))
    alloc = host_us(lambda: kernelforge.quantize(x, "mxfp8"))
    res = {"direct_us": direct, "quantize_out_us": with_out, "quantize_alloc_us": alloc,
           "overhead_out_us": with_out - direct, "overhead_alloc_us": alloc - direct}
    print(f"host per call: direct {direct:.2f} us, quantize(out=) {with_out:.2f} us (+{with_out - direct:.2f}), "
          f"quantize() {alloc:.2f} us (+{alloc - direct:.2f})", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-compile-ref", action="store_true")
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    res = {"device": name, "copy_GBps": copy_gbs, "host": host_overhead(), "cold": cold_start(),
           "kernels": kernel_rows(copy_gbs, not args.no_compile_ref)}
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
