"""Where a fresh process's import + first call goes, stage by stage (run on the GPU machine).

    PYTHONPATH=. python benchmarks/diag_first_call.py [--op quantize|dual|rht|rmsnorm]

torch is imported and a CUDA tensor made before the clock starts (as in bench_startup.py).
Prints the milliseconds of each stage: the package, the op families and spec schema, the
runtime (cache, dispatch, loader), the op modules with their torch.library registrations
(benchmarks/diag_registration.py splits those by entry point), resolving and loading the
kernel, the first launch with its synchronize, and the first calls of further ops. One process
per run: run it several times and read the medians.
"""
from __future__ import annotations

import argparse
import json
import resource
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="quantize", choices=["quantize", "dual", "rht", "rmsnorm"])
    args = ap.parse_args()
    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    cpu0 = time.process_time()
    use0 = resource.getrusage(resource.RUSAGE_SELF)
    marks = [("start", time.perf_counter())]

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter()))

    import kernelforge
    mark("import kernelforge")
    import kernelforge.families  # noqa: F401
    mark("families + spec schema")
    import kernelforge.ops._common as c
    mark("ops._common (cache, dispatch, loader)")
    import kernelforge.ops  # noqa: F401
    mark("op modules + registration")
    calls = {"quantize": lambda: kernelforge.quantize(x, "mxfp8"),
             "dual": lambda: kernelforge.quantize(x, "mxfp8", columnwise=True),
             "rht": lambda: kernelforge.quantize_nvfp4_rht(x),
             "rmsnorm": lambda: kernelforge.rmsnorm_quantize(x, w, "mxfp8")}
    c.dispatch_table()
    mark("cache root + dispatch table")
    calls[args.op]()
    mark(f"first {args.op} call (launch queued)")
    torch.cuda.synchronize()
    mark("synchronize")
    first_cpu_ms = 1e3 * (time.process_time() - cpu0)  # CPU time of the process (all threads) so far
    use1 = resource.getrusage(resource.RUSAGE_SELF)
    usage = {"user_ms": 1e3 * (use1.ru_utime - use0.ru_utime), "sys_ms": 1e3 * (use1.ru_stime - use0.ru_stime),
             "minor_faults": use1.ru_minflt - use0.ru_minflt, "major_faults": use1.ru_majflt - use0.ru_majflt,
             "involuntary_switches": use1.ru_nivcsw - use0.ru_nivcsw}
    calls[args.op]()
    torch.cuda.synchronize()
    mark(f"second {args.op} call + sync")
    g = kernelforge.nvfp4_global_scale(x)
    torch.cuda.synchronize()
    mark("nvfp4_global_scale first call + sync")
    kernelforge.quantize_nvfp4_rht(x, global_scale_row=g, global_scale_col=g)
    torch.cuda.synchronize()
    mark("RHT with given global scales + sync")
    for name in calls:
        if name != args.op:
            calls[name]()
            torch.cuda.synchronize()
            mark(f"first {name} call + sync")
    rows = [(name, 1e3 * (b - a)) for (_, a), (name, b) in zip(marks, marks[1:])]
    for name, ms in rows:
        print(f"  {name:42} {ms:8.3f} ms")
    print(f"  {'(CPU time up to the first synchronize)':42} {first_cpu_ms:8.3f} ms")
    print(json.dumps({"op": args.op, "stages_ms": dict(rows),
                      "first_cpu_ms": first_cpu_ms, "first_usage": usage}))


if __name__ == "__main__":
    main()
