"""Diagnose host-side costs: where the first call's time goes, and a profile of the per-call path."""
from __future__ import annotations

import cProfile
import pstats
import time

import torch


def first_call_breakdown() -> None:
    """Stages of a fresh process's first quantize call (run this file in a new process)."""
    import importlib

    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    marks = [("start", time.perf_counter())]
    import kernelforge  # noqa: F401
    q = importlib.import_module("kernelforge.ops.quantize")
    marks.append(("import kernelforge.ops", time.perf_counter()))
    from kernelforge.ops import _common
    table = _common.dispatch_table()
    marks.append(("resolve cache root", time.perf_counter()))
    coords = {"format": "mxfp8", "scale_mode": "floor", "layout": "swizzled", "dtype": "bfloat16"}
    cap = _common.device_capability(0)
    marks.append(("device capability", time.perf_counter()))
    cand = table.candidates("quantize", coords, cap)[0]
    marks.append(("dispatch views + candidates", time.perf_counter()))
    table.tuning_tables(_common.device_name(0), cand.arch, "quantize")
    marks.append(("device name + tuning table", time.perf_counter()))
    from kernelforge.runtime import loader
    rt = table._runtimes.get(cand.entry["extra"]["runtime_key"])
    from pathlib import Path as P
    loader._check_sha256(P(rt["main_path"]), rt["sha256"], "runtime library")
    marks.append(("sha256 runtime lib", time.perf_counter()))
    loader._check_sha256(P(cand.entry["main_path"]), cand.entry["sha256"], "kernel module")
    marks.append(("sha256 module", time.perf_counter()))
    fn = table.load(cand)
    marks.append(("tvm_ffi.load_module", time.perf_counter()))
    d, s = _common.output_buffers(None, x.device, (4096, 4096), (4096, 128), torch.float8_e4m3fn,
                                  torch.float8_e8m0fnu, ())
    marks.append(("alloc outputs", time.perf_counter()))
    fn(x, d, s, None)
    marks.append(("first fn call (no sync)", time.perf_counter()))
    torch.cuda.synchronize()
    marks.append(("sync", time.perf_counter()))
    fn(x, d, s, None)
    torch.cuda.synchronize()
    marks.append(("second call + sync", time.perf_counter()))
    q.quantize(x, "mxfp8", layout="swizzled")
    torch.cuda.synchronize()
    marks.append(("quantize() + sync", time.perf_counter()))
    for (_, a), (name, b) in zip(marks, marks[1:]):
        print(f"  {name:28} {(b - a) * 1e3:8.3f} ms")


def profile_calls() -> None:
    import kernelforge

    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    out = kernelforge.quantize(x, "mxfp8")
    for _ in range(1000):
        kernelforge.quantize(x, "mxfp8", out=out)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(20000):
        kernelforge.quantize(x, "mxfp8", out=out)
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    print("first call breakdown:")
    first_call_breakdown()
    profile_calls()
