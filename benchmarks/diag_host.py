"""Diagnose host-side costs: where the first call's time goes, and a profile of the per-call path."""
from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def first_call_breakdown() -> None:
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    marks = [("start", time.perf_counter())]
    import kernelforge.ops.quantize as q
    marks.append(("import ops", time.perf_counter()))
    import tvm_ffi  # noqa: F401
    marks.append(("import tvm_ffi", time.perf_counter()))
    from kernelforge.ops import _common
    table = _common.dispatch_table()
    table._load()
    marks.append(("index load", time.perf_counter()))
    coords = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
    cap = _common.device_capability(0)
    cand = table.candidates("quantize", coords, cap)[0]
    from kernelforge.runtime.loader import load_function
    rt = table._runtimes.get(cand.entry["extra"]["runtime_key"])
    fn = load_function(cand.entry, rt)
    marks.append(("sha256 + load_module", time.perf_counter()))
    d = torch.empty(4096, 4096, dtype=torch.uint8, device="cuda")
    s = torch.empty(4096 * 128, dtype=torch.uint8, device="cuda")
    marks.append(("alloc", time.perf_counter()))
    fn(x, d, s, None)
    marks.append(("first fn call (no sync)", time.perf_counter()))
    torch.cuda.synchronize()
    marks.append(("sync", time.perf_counter()))
    fn(x, d, s, None)
    torch.cuda.synchronize()
    marks.append(("second call + sync", time.perf_counter()))
    q.quantize(x, "mxfp8")
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
