"""kf_quack against quack's own path on one GPU: the first call in fresh processes, and kernel time.

    python side_by_side.py startup --runs 8 --kf-cache-dir DIR --json startup.json  # also a markdown table
    python side_by_side.py kernels --json kernels.json  # CUDA-graph replay, quack and kf_quack interleaved
    python side_by_side.py first-call --impl kf --op rmsnorm   # one fresh process (what `startup` runs)

First call: each process imports torch and initialises CUDA, makes its inputs and synchronises,
then the clock runs over the import of the library (`quack`, or `kf_quack.ops`) and its first
call up to a device synchronisation. Modes: `quack-cold` (quack's `.o` cache and CuTe-DSL's file
cache are empty directories: quack compiles), `quack-warm` (quack's `.o` cache filled by an
earlier process: quack loads the object), `kf-cache-dir` (kernelforge reads the directory
--kf-cache-dir through $KERNELFORGE_CACHE_DIR), `kf-wheel` (kernelforge's default layers: the
installed kernel wheel). Modes alternate process by process, so drift hits each alike. Kernel
time: the median over CUDA-graph replays of 20 back-to-back calls, quack's and kf_quack's
functions captured alike (their host code is not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = ("rmsnorm", "softmax", "cross_entropy")
MODES = ("quack-cold", "quack-warm", "kf-cache-dir", "kf-wheel")
M, N, VOCAB = 4096, 4096, 32768  # first-call shapes: bf16, every one a declared variant


def make_inputs(op: str):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    if op == "cross_entropy":
        x = torch.randn(M, VOCAB, device="cuda", generator=gen).bfloat16()
        return x, torch.randint(0, VOCAB, (M,), device="cuda", generator=gen)
    x = torch.randn(M, N, device="cuda", generator=gen).bfloat16()
    return (x, torch.randn(N, device="cuda", generator=gen).bfloat16()) if op == "rmsnorm" else (x,)


def call_of(impl: str, op: str):
    """The library's function for `op` (imports the library)."""
    if impl == "quack":
        import quack

        fns = {"rmsnorm": quack.rmsnorm, "softmax": quack.softmax,
               "cross_entropy": lambda x, t: quack.cross_entropy(x, t, reduction="none")}
    else:
        from kf_quack import ops

        fns = {"rmsnorm": ops.rmsnorm, "softmax": ops.softmax,
               "cross_entropy": lambda x, t: ops.cross_entropy(x, t, reduction="none")}
    return fns[op]


def first_call(impl: str, op: str) -> dict:
    import torch

    torch.cuda.init()
    args = make_inputs(op)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn = call_of(impl, op)
    t1 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    heavy = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("cutlass", "quack", "triton")})
    return {"impl": impl, "op": op, "import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3,
            "total_ms": (t2 - t0) * 1e3, "second_call_ms": (t3 - t2) * 1e3, "imported": heavy}


def run_child(mode: str, op: str, kf_cache_dir: str, warm_dir: str) -> dict:
    env = dict(os.environ)
    for name in ("KERNELFORGE_CACHE_DIR", "QUACK_CACHE_DIR", "CUTE_DSL_CACHE_DIR"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="quack-cold-") as cold:
        if mode == "quack-cold":
            env.update(QUACK_CACHE_DIR=f"{cold}/quack", CUTE_DSL_CACHE_DIR=f"{cold}/cute")
        elif mode == "quack-warm":
            env.update(QUACK_CACHE_DIR=warm_dir, CUTE_DSL_CACHE_DIR=f"{cold}/cute")
        elif mode == "kf-cache-dir":
            env["KERNELFORGE_CACHE_DIR"] = kf_cache_dir
        impl = "quack" if mode.startswith("quack") else "kf"
        proc = subprocess.run([sys.executable, __file__, "first-call", "--impl", impl, "--op", op],
                              capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{mode} {op}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "mode": mode}


def startup(args: argparse.Namespace) -> list[dict]:
    warm = tempfile.mkdtemp(prefix="quack-warm-")
    if "quack-warm" in args.modes:
        for op in args.ops:  # fill quack's .o cache once per kernel
            env = dict(os.environ, QUACK_CACHE_DIR=warm)
            subprocess.run([sys.executable, __file__, "first-call", "--impl", "quack", "--op", op], env=env,
                           check=True, capture_output=True)
    rows = []
    for r in range(args.runs):
        for op in args.ops:
            for mode in args.modes:
                row = run_child(mode, op, args.kf_cache_dir, warm)
                rows.append({**row, "run": r})
                print(f"{mode:13} {op:14} total {row['total_ms']:9.1f} ms (import {row['import_ms']:8.1f}, "
                      f"first call {row['first_call_ms']:8.1f}); imported {row['imported']}", flush=True)
    return rows


def startup_table(rows: list[dict], device: str) -> str:
    lines = [f"First call in a fresh process ({device}; torch imported and CUDA initialised first; import of the "
             "library + first call + synchronize, ms, min / median / max over the processes):", "",
             "| op | " + " | ".join(sorted({r["mode"] for r in rows}, key=MODES.index)) + " |",
             "|---|" + "---:|" * len({r["mode"] for r in rows})]
    for op in OPS:
        cells = []
        for mode in sorted({r["mode"] for r in rows}, key=MODES.index):
            t = [r["total_ms"] for r in rows if r["op"] == op and r["mode"] == mode]
            cells.append(f"{min(t):.1f} / {statistics.median(t):.1f} / {max(t):.1f} (n={len(t)})" if t else "-")
        if any(c != "-" for c in cells):
            lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def graph_time_us(fn, args, calls: int = 20, replays: int = 30) -> float:
    """Median GPU time of one call over CUDA-graph replays of `calls` back-to-back calls."""
    import torch

    fn(*args)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(*args)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


KERNEL_CASES = [  # (op, label, shape, extra)
    ("rmsnorm", "bf16 x, bf16 w", (16384, 4096), "weight"),
    ("rmsnorm", "bf16 x, fp32 w, bf16 residual", (16384, 8192), "residual"),
    ("rmsnorm", "fp32 x, fp32 w", (16384, 4096), "fp32"),
    ("softmax", "bf16", (16384, 4096), ""),
    ("softmax", "bf16 (2-CTA cluster)", (4096, 32768), ""),
    ("cross_entropy", "bf16, int64 target", (4096, 32768), ""),
    ("cross_entropy", "bf16, int64 target (8-CTA cluster)", (4096, 128256), ""),
]


def kernel_case(op: str, shape: tuple[int, int], extra: str):
    """(quack's call, kf_quack's call) of one case, each taking no argument."""
    import quack
    import torch
    from kf_quack import ops

    m, n = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    dtype = torch.float32 if extra == "fp32" else torch.bfloat16
    x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    if op == "rmsnorm":
        w = torch.randn(n, device="cuda", generator=gen).to(torch.float32 if extra != "weight" else dtype)
        if extra == "residual":
            r = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
            return (lambda: quack.rmsnorm(x, w, residual=r, prenorm=True)), (lambda: ops.rmsnorm(x, w, r, prenorm=True))
        return (lambda: quack.rmsnorm(x, w)), (lambda: ops.rmsnorm(x, w))
    if op == "softmax":
        return (lambda: quack.softmax(x)), (lambda: ops.softmax(x))
    t = torch.randint(0, n, (m,), device="cuda", generator=gen)
    return (lambda: quack.cross_entropy(x, t, reduction="none")), (lambda: ops.cross_entropy(x, t, reduction="none"))


def kernels(args: argparse.Namespace) -> list[dict]:
    import torch

    rows = []
    for op, label, shape, extra in KERNEL_CASES:
        q, k = kernel_case(op, shape, extra)
        qt, kt = [], []
        for _ in range(args.rounds):  # interleaved
            qt.append(graph_time_us(q, ()))
            kt.append(graph_time_us(k, ()))
        row = {"op": op, "case": label, "shape": list(shape), "quack_us": min(qt), "kf_us": min(kt)}
        rows.append(row)
        print(f"{op:14} {label:38} {shape[0]}x{shape[1]:<7} quack {row['quack_us']:8.2f} us  kf_quack "
              f"{row['kf_us']:8.2f} us  ratio {row['kf_us'] / row['quack_us']:.3f}", flush=True)
        torch.cuda.empty_cache()
    return rows


def kernels_table(rows: list[dict], device: str) -> str:
    lines = [f"Kernel time ({device}; median of CUDA-graph replays of 20 back-to-back calls, best of the "
             "interleaved rounds, us per call):", "", "| op | case | M x N | quack | kf_quack | kf / quack |",
             "|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['case']} | {r['shape'][0]}x{r['shape'][1]} | {r['quack_us']:.2f} | "
                     f"{r['kf_us']:.2f} | {r['kf_us'] / r['quack_us']:.3f} |")
    return "\n".join(lines)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("first-call")
    one.add_argument("--impl", choices=("quack", "kf"), required=True)
    one.add_argument("--op", choices=OPS, required=True)
    st = sub.add_parser("startup")
    st.add_argument("--runs", type=int, default=8)
    st.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    st.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    st.add_argument("--kf-cache-dir", default="")
    st.add_argument("--json", type=Path)
    kn = sub.add_parser("kernels")
    kn.add_argument("--rounds", type=int, default=3)
    kn.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.cmd == "first-call":
        print(json.dumps(first_call(args.impl, args.op)))
        return
    if args.cmd == "startup":
        if "kf-cache-dir" in args.modes and not args.kf_cache_dir:
            parser.error("--kf-cache-dir names the cache directory of the kf-cache-dir mode")
        rows = startup(args)
        table = startup_table(rows, device_name())
    else:
        rows = kernels(args)
        table = kernels_table(rows, device_name())
    print("\n" + table)
    if args.json:
        args.json.write_text(json.dumps({"device": device_name(), "rows": rows, "table": table}, indent=1))


if __name__ == "__main__":
    main()
