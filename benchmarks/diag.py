"""Diagnostics of startup, host cost and kernel paths: one subcommand each, run on a GPU machine.

    PYTHONPATH=. python benchmarks/diag.py SUBCOMMAND [options]      # -h lists them; SUBCOMMAND -h its options

first-call       where one fresh process's import + first call goes, stage by stage
startup-modes    first-call in many fresh processes, sorted, with CPU time, page faults, optional pinning
profile          cProfile of import + the first call in a fresh process
stages           the runtime's steps inside the first call (resolve, tuning tables, loads, file checks)
registration     torch.library registration time per entry point during `import kernelforge.ops`
startup-stall    per-op call, load and synchronize times of fresh processes, under several modes
alloc            host cost of the ways an allocating op can make its outputs
ones             the ways to make the [1.0] NVFP4 global-scale stand-in, in a fresh process
dual-unswizzle   linear scales of the columnwise op: direct kernel against the staged path
wheel-signature  the cost of checking an installed kernel wheel's signature (device/node_check.sh)
eager-split      an eager call's time split into host path, launch and kernel (plain and grouped)
launch-cost      the loaded kernel function's own call, by op, size and queue state
clocks           the SM clock, power and clock-event reasons while one kernel runs back to back

Fresh-process subcommands set up like `bench_startup.py` (torch imported, CUDA tensors made) and
print each child's figures, then the medians. Import kernelforge from compiled bytecode (`python
-m compileall kernelforge` first) unless the source compile is what you want to see.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_startup and _timing, imported by the subcommands that use them


# --- fresh children -------------------------------------------------------------------------------

def run_children(code: str, runs: int) -> list[dict[str, float]]:
    """Run `python -c code` `runs` times (cwd=/, this environment), printing each child's figures (its
    last stdout line, a JSON object of milliseconds); then print the median of every key."""
    results = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=os.environ.copy(), cwd="/")
        if proc.returncode != 0:
            sys.exit(f"the child failed:\n{proc.stderr[-3000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps({k: round(v, 3) for k, v in results[-1].items()}))
    print("medians (ms):")
    for key in sorted({k for r in results for k in r}):
        print(f"  {key:32} {statistics.median(r.get(key, 0.0) for r in results):7.3f}")
    return results


# Child-side timers (prepended to a child's code): `timed(name, fn)` wraps fn so that its
# outermost calls add their milliseconds to spent[name]; wrappers given one shared `depth` list
# count only the outermost call among all of them (inner calls are part of the outer one).
TIMERS = r'''
import functools
spent = {}

def timed(name, fn, depth=None):
    depth = [0] if depth is None else depth
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[name] = spent.get(name, 0.0) + (time.perf_counter() - t) * 1e3
    return wrapper
'''


# --- first-call, startup-modes ---------------------------------------------------------------------

FIRST_CALL_OPS = ("quantize", "dual", "rht", "rmsnorm")
FIRST = 7  # first-call stages up to and including the first call's synchronize
FIRST_SPLIT = ("resolve (candidates, tuning table)", "load (runtime library, module)", "checks + launch")


def first_call(args: argparse.Namespace) -> None:
    """One process: torch imported and a CUDA tensor made before the clock starts (as in
    bench_startup.py), then the milliseconds of each stage: the package, the op families and spec
    schema, the runtime modules (cache, dispatch, loader), the op modules with their torch.library
    registrations (what the first `kernelforge.<op>` attribute imports; `registration` splits those
    by entry point), the cache layers and dispatch table, the first call until it returns (the
    launch queued) with its synchronize, and the first calls of further ops. The first call is
    also split (`first_split_ms`) into resolving the build (candidates, tuning table), loading it
    (the verified runtime library and module) and the rest (argument checks, outputs, launch).
    The last line is JSON."""
    import resource

    import torch

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
    import kernelforge.registry as registry
    registry.builtin_api()
    mark("op families + spec schema")
    import kernelforge.ops.launch as c
    mark("runtime modules (cache, dispatch, loader)")
    kernelforge.quantize  # noqa: B018 - the first public attribute imports and registers every built-in op
    mark("op modules + torch.library registration")
    c.dispatch_table()
    mark("cache layers + dispatch table")
    import kernelforge.runtime.dispatch as dispatch
    import kernelforge.runtime.layer_reader as layer_reader

    spent = {"resolve": 0.0, "load": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += (time.perf_counter() - t) * 1e3
        return wrapper

    resolve, load = dispatch.DispatchTable.resolve, layer_reader.load_function
    dispatch.DispatchTable.resolve = timed("resolve", resolve)
    layer_reader.load_function = timed("load", load)  # the name LayerReader.load calls
    calls = {"quantize": lambda: kernelforge.quantize(x, "mxfp8"),
             "dual": lambda: kernelforge.quantize(x, "mxfp8", columnwise=True),
             "rht": lambda: kernelforge.quantize_nvfp4_rht(x),
             "rmsnorm": lambda: kernelforge.rmsnorm_quantize(x, w, "mxfp8")}
    t_call = time.perf_counter()
    calls[args.op]()
    mark(f"first {args.op} call (launch queued)")
    first_ms = (time.perf_counter() - t_call) * 1e3
    dispatch.DispatchTable.resolve, layer_reader.load_function = resolve, load
    torch.cuda.synchronize()
    mark("synchronize")
    first_cpu_ms = 1e3 * (time.process_time() - cpu0)  # CPU time of the process (all threads) so far
    use1 = resource.getrusage(resource.RUSAGE_SELF)
    usage = {"user_ms": 1e3 * (use1.ru_utime - use0.ru_utime), "sys_ms": 1e3 * (use1.ru_stime - use0.ru_stime),
             "minor_faults": use1.ru_minflt - use0.ru_minflt, "major_faults": use1.ru_majflt - use0.ru_majflt,
             "involuntary_switches": use1.ru_nivcsw - use0.ru_nivcsw}
    split = dict(zip(FIRST_SPLIT, (spent["resolve"] - spent["load"], spent["load"], first_ms - spent["resolve"])))
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
    for name, ms in split.items():
        print(f"    of the first call: {name:32} {ms:8.3f} ms")
    print(f"  {'(CPU time up to the first synchronize)':42} {first_cpu_ms:8.3f} ms")
    print(json.dumps({"op": args.op, "stages_ms": dict(rows), "first_split_ms": split,
                      "first_cpu_ms": first_cpu_ms, "first_usage": usage}))


def first_call_children(op: str, runs: int, envs: dict[str, dict[str, str]] | None = None,
                        preexec_fn=None) -> dict[str, list[dict]]:
    """`first-call --op op` in `runs` fresh processes per environment of `envs` (name -> the
    environment; default: this one), alternated; each child's parsed JSON, per environment."""
    envs = envs or {"": os.environ.copy()}
    out: dict[str, list[dict]] = {name: [] for name in envs}
    for _ in range(runs):
        for name, env in envs.items():
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "first-call", "--op", op],
                                  capture_output=True, text=True, cwd="/", env=env, preexec_fn=preexec_fn)
            if proc.returncode != 0:
                raise RuntimeError(f"diag.py first-call failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            out[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def startup_modes(args: argparse.Namespace) -> None:
    """Why fresh-process startup is bimodal: `first-call` in `--runs` fresh processes, one after
    another (with `--pause` seconds between them, to see whether the previous process's teardown
    slows the next one), every process's stages as one row, sorted by the sum of the
    import-and-first-call stages, so that the stage holding the extra milliseconds of the slow
    processes stands out, with the process's CPU time over those stages (CPU time that grows with
    the wall time: slower CPU work; wall time alone: waiting), split into user and system time, with
    its page faults and involuntary context switches. `--cpus` pins the processes to those CPUs."""
    cpus = {int(c) for c in args.cpus.split(",") if c}
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    rows, cpu_ms, usage = [], [], []
    for _ in range(args.runs):
        try:
            [result] = first_call_children(args.op, 1, preexec_fn=pin)[""]
        except RuntimeError as exc:
            sys.exit(str(exc))
        rows.append(result["stages_ms"])
        cpu_ms.append(result["first_cpu_ms"])
        usage.append(result["first_usage"])
        time.sleep(args.pause)
    names = list(rows[0])
    short = [n.split(" (")[0][:14] for n in names]
    print(f"pause {args.pause}s, cpus {args.cpus or 'any'}, {args.runs} processes, op {args.op}; ms per stage, "
          f"sorted by the first {FIRST}")
    extra = ["user", "sys", "minflt", "majflt", "invol.sw"]
    print(" ".join(f"{s:>14}" for s in ["first total", "first CPU", *extra, *short]))
    for row, cpu, use in sorted(zip(rows, cpu_ms, usage), key=lambda r: sum(list(r[0].values())[:FIRST])):
        vals = list(row.values())
        print(" ".join(f"{v:14.2f}" for v in [sum(vals[:FIRST]), cpu, *use.values(), *vals]))
    med = [statistics.median(r[n] for r in rows) for n in names]
    use_med = [statistics.median(u[k] for u in usage) for k in usage[0]]
    print(" ".join(f"{v:14.2f}" for v in [statistics.median(sum(list(r.values())[:FIRST]) for r in rows),
                                          statistics.median(cpu_ms), *use_med, *med]), "(medians)")


# --- profile, stages, registration -----------------------------------------------------------------

PROFILE = r"""
import cProfile, io, pstats
op, top = sys.argv[1], int(sys.argv[2])
prof = cProfile.Profile()
prof.enable()
import kernelforge
CALLS[op](kernelforge)
torch.cuda.synchronize()
prof.disable()
for key in ("tottime", "cumulative"):
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
    print(f"== by {key}")
    print("\n".join(line for line in s.getvalue().splitlines() if line.strip()))
"""


def profile(args: argparse.Namespace) -> None:
    """cProfile of `import kernelforge` + the first call of `--op` with its synchronize, in a fresh
    process; functions by own time and by cumulative time (cProfile's overhead inflates
    Python-heavy parts: compare rows with each other, not with the unprofiled milliseconds)."""
    from bench_startup import SETUP

    proc = subprocess.run([sys.executable, "-c", SETUP + PROFILE, args.op, str(args.top)], capture_output=True,
                          text=True, env=os.environ.copy(), cwd="/")
    if proc.returncode != 0:
        sys.exit(f"the profiled child failed:\n{proc.stderr[-3000:]}")
    print(proc.stdout)


STAGES = r"""
import kernelforge, kernelforge.ops
import kernelforge.runtime.loader as loader
import kernelforge.runtime.dispatch as dispatch
import kernelforge.runtime.layer_reader as layer_reader

for name in ("tvm_ffi_library", "_load_runtime", "load_function", "open_verified"):
    setattr(loader, name, timed(name, getattr(loader, name)))
layer_reader.load_function = loader.load_function  # the name layer_reader imported
for name in ("resolve", "tuning_tables"):
    setattr(dispatch.DispatchTable, name, timed("DispatchTable." + name, getattr(dispatch.DispatchTable, name)))
t0 = time.perf_counter()
kernelforge.quantize(x, "mxfp8")
t1 = time.perf_counter()
torch.cuda.synchronize()
t2 = time.perf_counter()
spent["first call"] = (t1 - t0) * 1e3
spent["synchronize"] = (t2 - t1) * 1e3
print(json.dumps(spent))
"""


def stages(args: argparse.Namespace) -> None:
    """Where the first call's milliseconds go inside the runtime. Each child imports kernelforge.ops
    (not timed), wraps the runtime's steps with timers (inclusive: a step's time contains the steps
    it calls; each counts its outermost calls only), then times the first `quantize(x, "mxfp8")` and
    its synchronize: `first call` (until it returns, the launch queued), `synchronize`,
    `DispatchTable.resolve` (the candidates, the tuning table and the loads),
    `DispatchTable.tuning_tables` (reading, verifying and parsing the tuning table),
    `load_function` (the runtime library and the module, verified and loaded), `_load_runtime` (the
    runtime library with libtvm_ffi.so), `tvm_ffi_library` (dlopen of libtvm_ffi.so alone),
    `open_verified` (opening and hashing files against the index). The rest of the first call
    (argument checks, output allocation, the launch) is `first call` minus `DispatchTable.resolve`."""
    from bench_startup import SETUP

    run_children(SETUP + TIMERS + STAGES, args.runs)


REGISTRATION = r"""
outer = [0]  # custom_op calls Library.define/impl itself: count the outermost call only
import torch.library as tl
from torch._library import simple_registry
tl.custom_op = timed("custom_op", tl.custom_op, outer)
tl.infer_schema = timed("infer_schema", tl.infer_schema, outer)
for meth in ("define", "impl", "_register_fake"):
    if hasattr(tl.Library, meth):
        setattr(tl.Library, meth, timed("Library." + meth, getattr(tl.Library, meth), outer))
holder = type(simple_registry.singleton.find("kf_diag::none").fake_impl)
holder.register = timed("fake registry", holder.register, outer)
t0 = time.perf_counter()
import kernelforge.ops
spent["import kernelforge.ops (total)"] = (time.perf_counter() - t0) * 1e3
print(json.dumps(spent))
"""


def registration(args: argparse.Namespace) -> None:
    """Where `import kernelforge.ops`'s torch.library registration time goes: each child wraps the
    entry points the op modules call (custom_op, Library.define / impl / _register_fake,
    infer_schema, the fake registry) with timers that count only the outermost call, imports
    kernelforge.ops, and prints the milliseconds per entry point and the import's total."""
    from bench_startup import SETUP

    run_children(SETUP + TIMERS + REGISTRATION, args.runs)


# --- startup-stall ---------------------------------------------------------------------------------

STALL = r"""
import gc, logging, os, re
order, mode = sys.argv[1].split(","), sys.argv[2]
if mode == "nogc":
    gc.disable()
events, started, current = [], [0.0], ["import"]
def hook(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        events.append({"op": current[0], "gen": info["generation"], "ms": 1e3 * (time.perf_counter() - started[0])})
gc.callbacks.append(hook)
loads = {}
class Loads(logging.Handler):
    def emit(self, record):
        m = re.search(r" in ([0-9.]+) ms", record.getMessage())
        if m:
            loads[current[0]] = loads.get(current[0], 0.0) + float(m.group(1))
log = logging.getLogger("kernelforge.runtime.loader")
log.setLevel(logging.INFO); log.addHandler(Loads()); log.propagate = False
stages = {}
if mode == "stages":  # time the loader's steps (wall/CPU ms): the file check and its parts, the dynamic linker
    import ctypes, os
    import kernelforge.runtime.loader as L
    from kernelforge.cache.read.trust import TrustedRoot
    def timed(name, fn):
        def wrapper(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                ms = 1e3 * (time.perf_counter() - t)
                if ms > 0.05 or name in ("verify", "dlopen"):
                    stages.setdefault(current[0], []).append(f"{name} {ms:.2f}/{1e3 * (time.thread_time() - c):.2f}")
        return wrapper
    L.open_verified = timed("verify", L.open_verified)
    L._check_meta = timed("meta", L._check_meta)
    TrustedRoot.open_dir = timed("open_dir", TrustedRoot.open_dir)
    TrustedRoot.open_file_at = timed("open_file", TrustedRoot.open_file_at)
    TrustedRoot._check = timed("check", TrustedRoot._check)
    os.read = timed("read", os.read)
    ctypes.CDLL = timed("dlopen", ctypes.CDLL)
def fds():
    names = [int(n) for n in os.listdir("/proc/self/fd")]
    return len(names), max(names)
if mode == "prefd":  # grow this process's descriptor table before the clock starts
    os.dup2(0, 255)
    os.close(255)
if mode == "same":
    xs = [torch.randn(128 * (i + 1), 256, device=dev, dtype=torch.bfloat16) for i in range(len(order))]
    torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
rows = []
for i, op in enumerate(order):
    current[0] = op
    n = len(sys.modules)
    if mode == "sleep" and i:
        time.sleep(0.02)
    t = time.perf_counter() if i else t0
    if mode == "same":
        kernelforge.quantize(xs[i], "mxfp8")
    else:
        CALLS[op](kernelforge)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    rows.append({"op": op, "call_ms": 1e3 * (t1 - t), "sync_ms": 1e3 * (t2 - t1), "load_ms": loads.get(op, 0.0),
                 "modules": len(sys.modules) - n, "stages": stages.get(op, []), "fds": fds(),
                 "gc": [f"gen{e['gen']} {e['ms']:.1f}" for e in events if e["op"] == op and e["ms"] > 0.5]})
print(json.dumps({"rows": rows}))
"""


def _describe_stall(r: dict, mode: str) -> str:
    """One op's row: call ms (load ms) + sync ms, open descriptors, and whatever else was recorded."""
    text = (f"{r['op'] if mode != 'same' else 'q'}: {r['call_ms']:.1f} ({r['load_ms']:.1f}) + {r['sync_ms']:.1f}"
            f" fds {r['fds'][0]} (max {r['fds'][1]})")
    if r["modules"]:
        text += f" +{r['modules']}m"
    if r["gc"]:
        text += f" {r['gc']}"
    if r["stages"]:
        text += f" [{', '.join(r['stages'])}]"
    return text


def startup_stall(args: argparse.Namespace) -> None:
    """Where fresh-process stalls come from, op by op: the startup benchmark's children (torch
    imported, CUDA ready, then `import kernelforge` + the first call of every op in a rotated order),
    per op the host time of the call (with the module load the loader logs), the synchronize after
    it, the modules it imported, open descriptors and any garbage collection that fell in it. Modes:
    `on` as the benchmark runs; `nogc` with the collector disabled; `eager` with
    CUDA_MODULE_LOADING=EAGER; `same` calls the first op 8 times with distinct shapes instead;
    `sleep` sleeps 20 ms before each further op (does a stall follow the clock or the count?);
    `prefd` grows the descriptor table (dup2 to 255) before the clock starts; `stages` times the
    loader's file check, its parts, and the dynamic-linker load of each module (wall/thread CPU ms)."""
    from bench_startup import OPS, SETUP

    def child(order: list[str], mode: str) -> dict:
        env = os.environ.copy()
        if mode == "eager":
            env["CUDA_MODULE_LOADING"] = "EAGER"
        proc = subprocess.run([sys.executable, "-c", SETUP + STALL, ",".join(order), mode], capture_output=True,
                              text=True, cwd="/", env=env)
        if proc.returncode != 0:
            sys.exit(f"child failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    for mode in args.modes.split(","):
        print(f"== mode {mode}: per op 'call ms (load ms) + sync ms'")
        worst = []
        for i in range(args.runs):
            first = OPS[i % len(OPS)]
            rest = [op for op in OPS if op != first]
            order = [first, *rest[i % len(rest):], *rest[:i % len(rest)]]
            rows = child(order, mode)["rows"]
            worst.append(max(range(1, len(rows)), key=lambda j: rows[j]["call_ms"] + rows[j]["sync_ms"]))
            print("  " + " | ".join(_describe_stall(r, mode) for r in rows))
        print(f"  slowest further call at position: {sorted(worst)} (median {statistics.median(worst)})")


# --- alloc, ones ------------------------------------------------------------------------------------

def alloc(args: argparse.Namespace) -> None:
    """Host cost of the ways an allocating op can make its two outputs (data, scale), us per call
    (best of interleaved rounds, `_timing.host_us`): two torch.empty calls (what ops do), one byte
    buffer split into two typed views, torch.empty with an int device, torch.empty_like of tensors
    of the right shapes, and one torch.empty."""
    import torch

    from _timing import host_us

    dev = torch.device("cuda", 0)
    fp8, e8 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    d_shape, s_shape = (128, 256), (128, 8)
    nd, ns = 128 * 256, 128 * 8

    def two_empty():
        return torch.empty(d_shape, dtype=fp8, device=dev), torch.empty(s_shape, dtype=e8, device=dev)

    def two_empty_int():
        return torch.empty(d_shape, dtype=fp8, device=0), torch.empty(s_shape, dtype=e8, device=0)

    def one_buffer_views():
        buf = torch.empty(nd + ns, dtype=torch.uint8, device=dev)
        return buf[:nd].view(fp8).view(d_shape), buf[nd:].view(e8).view(s_shape)

    def one_buffer_split():
        d, s = torch.empty(nd + ns, dtype=torch.uint8, device=dev).split((nd, ns))
        return d.view(fp8).view(d_shape), s.view(e8).view(s_shape)

    like_d, like_s = torch.empty(d_shape, dtype=fp8, device=dev), torch.empty(s_shape, dtype=e8, device=dev)

    def empty_like_pair():
        return torch.empty_like(like_d), torch.empty_like(like_s)

    paths = {"two torch.empty": two_empty, "two torch.empty (int device)": two_empty_int,
             "one buffer + slice views": one_buffer_views, "one buffer + split views": one_buffer_split,
             "two empty_like": empty_like_pair, "one torch.empty": lambda: torch.empty(d_shape, dtype=fp8, device=dev)}
    best: dict[str, float] = {}
    for _ in range(3):
        for name, f in paths.items():
            best[name] = min(best.get(name, float("inf")), host_us(f))
    for name, us in best.items():
        print(f"{name:32s} {us:6.2f} us")
    print(json.dumps({"device": torch.cuda.get_device_name(), **best}))


ONES = r"""
import json, sys, time
import torch
how = sys.argv[1]
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t = {}
t0 = time.perf_counter()
if how == "side_stream":
    side = torch.cuda.Stream()
    t["stream_ms"] = (time.perf_counter() - t0) * 1e3
    with torch.cuda.stream(side):
        one = torch.tensor([1.0], dtype=torch.float32, device="cuda")
    side.synchronize()
elif how == "current_stream":
    one = torch.tensor([1.0], dtype=torch.float32, device="cuda")
elif how == "pinned":
    host = torch.tensor([1.0], dtype=torch.float32).pin_memory()
    t["pin_ms"] = (time.perf_counter() - t0) * 1e3
    one = host.to("cuda", non_blocking=True)
    torch.cuda.current_stream().synchronize()
else:
    one = torch.empty(1, device="cuda").fill_(1.0)
    torch.cuda.synchronize()
t["total_ms"] = (time.perf_counter() - t0) * 1e3
assert one.item() == 1.0
print(json.dumps({"how": how, **{k: round(v, 3) for k, v in t.items()}}))
"""


def ones(args: argparse.Namespace) -> None:
    """What making the [1.0] device tensor that stands in for a missing NVFP4 global scale costs a
    fresh process (torch imported, CUDA context ready), `--runs` processes per way, interleaved:
    on a new torch side stream, on the current stream, from pinned memory, by fill_. One JSON line
    per process."""
    for _ in range(args.runs):
        for how in args.how.split(","):
            proc = subprocess.run([sys.executable, "-c", ONES, how], capture_output=True, text=True, cwd="/")
            if proc.returncode != 0:
                sys.exit(f"the child failed:\n{proc.stderr[-3000:]}")
            print(proc.stdout.strip().splitlines()[-1])


# --- dual-unswizzle ---------------------------------------------------------------------------------

UNSWIZZLE_SHAPES = ((4096, 7168), (8192, 7168), (16384, 8192))


def dual_unswizzle(args: argparse.Namespace) -> None:
    """For each format, shape and output set (dual, columnwise-only), CUDA-graph replay (as
    benchmarks/run.py times it): the call with linear scales through the direct kernel, the same
    call through the staged path (the swizzled kernel, then the scale_layout pass kernel), the
    swizzled call alone and the pass alone; both linear paths' outputs must be equal byte for byte.
    The paths are forced through the device's staging rule (`launch.staging_rule`: every format and
    output set staged, or none); `rule` says which path this card's rule takes at that shape (its
    tuning table's, else the shipped one; `kernelforge tune` measures it). `--torch-pass` also
    times a torch copy that permutes the swizzled scales (4-byte words)."""
    import torch

    import kernelforge
    from _timing import copy_bandwidth, graph_us, io_bytes, rotating_inputs, same_size_copy_us
    from kernelforge.families.scale_layout import op as scale_layout
    from kernelforge.families.scale_layout import staging
    from kernelforge.formats import FORMATS

    def torch_unswizzle_into(dst: torch.Tensor, sw: torch.Tensor) -> None:
        """Linear [M, C] scales (M % 128 == 0, C % 4 == 0) from the 128x4 swizzled layout, with torch."""
        m, c = dst.shape
        a, b = m // 128, c // 4
        src = sw.view(torch.uint8).view(torch.int32).view(a, b, 32, 4).permute(0, 3, 2, 1)
        dst.view(torch.uint8).view(torch.int32).view(a, 4, 32, b).copy_(src)

    from kernelforge.ops import launch

    card_rule = launch.staging_rule

    def forced(staged: bool | None) -> None:
        """Every format and output set staged (True), none (False), or this card's rule (None)."""
        rule = {staging.pair_name(f, o): 0 if staged else None for f, o in staging.PAIRS}
        launch.staging_rule = card_rule if staged is None else lambda dev: rule

    bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}, copy {bw:.0f} GB/s")
    for m, k in UNSWIZZLE_SHAPES:
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
                forced(None)
                linear = tuple(outs["direct"][1::2])
                takes = "staged" if scale_layout.staged(FORMATS[fmt], m, k, rowwise, "none", linear) else "direct"
                line = (f"{fmt} {m}x{k} {what:10s} rule: {takes:6s}  "
                        f"direct {times['direct']:7.1f} us ({pct(times['direct']):5.1f}%)  "
                        f"staged {times['staged']:7.1f} us ({pct(times['staged']):5.1f}%)  swizzled "
                        f"{times['swizzled']:7.1f} us  pass alone {t_alone:5.1f} us ({moved / t_alone / 1e3:.0f} GB/s, "
                        f"copy of as many bytes {same_size_copy_us(moved):5.1f} us)  equal: {same}")
                if args.torch_pass and m % 128 == 0:
                    lin = outs["direct"]
                    idx = [(1, 1), (3, 3)] if rowwise else [(1, 1)]
                    tgt = [torch.empty_like(t) for t in lin]
                    t_pass = graph_us(lambda: [torch_unswizzle_into(tgt[i], sw[j]) for i, j in idx])
                    line += f"  torch pass {t_pass:5.1f} us"
                print(line, flush=True)
    forced(None)


# --- wheel-signature --------------------------------------------------------------------------------

WHEEL_CHILD = r'''
import json, time
import torch
x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
kernelforge.quantize(x, "mxfp8")
torch.cuda.synchronize()
t1 = time.perf_counter()
from kernelforge.cache.read import wheel_signature
from kernelforge.cache.read.layers import wheel_layers
t2 = time.perf_counter()
[wheel_signature.signature_status(l.root.parent, "kernelforge-kernels-sm90a") for l in wheel_layers()[:1]]
t3 = time.perf_counter()
print(json.dumps({"first_op_ms": (t1 - t0) * 1e3, "layers_and_check_again_ms": (t3 - t2) * 1e3}))
'''


def wheel_signature(args: argparse.Namespace) -> None:
    """What checking a kernel wheel's signature costs a fresh process: import + first op, signed
    wheel (the release key trusted) against the same wheel unsigned (allowed by
    KERNELFORGE_ALLOW_UNSIGNED) and against its cache directory named as an explicit root (no wheel
    layers at all), in interleaved fresh processes, plus the layer discovery and check again in the
    same process. Run where the kernel wheel is installed into --site (device/node_check.sh): the
    unsigned copy is made by removing SIGNATURE.json from a copy of that directory."""
    import shutil

    site = Path(args.site)
    unsigned = Path(tempfile.mkdtemp(prefix="kf-unsigned-")) / "site"
    shutil.copytree(site, unsigned, symlinks=True)
    for sig in unsigned.glob("kernelforge_kernels_*/SIGNATURE.json"):
        sig.unlink()
    wheel_cache = next(site.glob("kernelforge_kernels_*/cache"))
    setups = {
        "signed": {**os.environ, "PYTHONPATH": str(site)},
        "unsigned": {**os.environ, "PYTHONPATH": str(unsigned), "KERNELFORGE_ALLOW_UNSIGNED": "*"},
        # the same files as an explicit cache root: no entry-point scan, no wheel layer, no signature
        "explicit": {**os.environ, "PYTHONPATH": str(site), "KERNELFORGE_CACHE_DIR": str(wheel_cache)},
    }
    results: dict[str, list[dict[str, float]]] = {k: [] for k in setups}
    for _ in range(args.runs):
        for name, env in setups.items():
            proc = subprocess.run([sys.executable, "-c", WHEEL_CHILD], capture_output=True, text=True, env=env,
                                  cwd="/")
            if proc.returncode != 0:
                sys.exit(f"{name} child failed:\n{proc.stderr[-3000:]}")
            results[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for name, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{name:9} median of {len(rows)}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))


# --- eager-split ------------------------------------------------------------------------------------

EAGER_CASES = (("quantize", "mxfp8", 0), ("quantize", "nvfp4", 0), ("grouped", "mxfp8", 8), ("grouped", "mxfp8", 64),
               ("grouped", "mxfp8", 1024), ("grouped", "nvfp4", 8), ("grouped", "nvfp4", 1024))


def out_call(op: str, fmt: str, g: int, x, gen=None):
    """`(call, direct)` of one `eager-split` / `launch-cost` case: `call(x)` makes the out= call of
    op "quantize" (g = 0, swizzled) or "grouped" (g groups of random sizes over x's rows) into
    buffers made for x; `direct()` calls the loaded kernel function that call's out= fast path
    remembered (the TVM-FFI call and the launch) with x and those buffers. One call is made."""
    import torch

    import kernelforge
    from kernelforge.ops import fast_path

    a = {} if fmt == "nvfp4" else {"scale_mode": "floor"}
    if op == "quantize":
        out = kernelforge.quantize(x, fmt, layout="swizzled", **a)

        def call(x):
            return kernelforge.quantize(x, fmt, layout="swizzled", out=out, **a)
    else:
        gen = gen if gen is not None else torch.Generator().manual_seed(0)
        sizes = torch.multinomial(torch.ones(g), x.shape[0], replacement=True, generator=gen).bincount(minlength=g)
        offs = sizes.cumsum(0).to(torch.int32).cuda()
        out = kernelforge.quantize_grouped(x, offs, fmt, **a)

        def call(x):
            return kernelforge.quantize_grouped(x, offs, fmt, out=out, **a)
    call(x)
    hit = next(h for k, h in fast_path.fast_calls.items() if k[0] == ("quantize_grouped" if g else "quantize")
               and k[1] == x.shape and k[5] == fmt and h.out_spans)
    fn_args = (x, out[0], out[1], hit.arg) if not g else (x, offs, *out, hit.arg)
    return call, lambda: hit.fn(*fn_args)


def eager_split_row(op: str, fmt: str, g: int, xs: list, gen=None) -> dict:
    """One case of `eager-split` (see there): op "quantize" (g = 0) or "grouped" with g groups of
    random sizes over the rows of the inputs `xs` (`_timing.rotating_inputs`), out= given; us per
    call: host, direct, eager, graph1, b2b, the kernels' own times (a list), and `call` (a function
    of x making that call, for profiling it further)."""
    import torch

    from _timing import eager_event_us, graph_us, host_us

    call, direct_call = out_call(op, fmt, g, xs[0], gen)
    it = iter(range(10**9))
    b2b = graph_us(lambda: call(xs[next(it) % len(xs)]))
    gr = torch.cuda.CUDAGraph()
    call(xs[0])
    torch.cuda.synchronize()
    with torch.cuda.graph(gr):
        call(xs[0])
    graph1 = eager_event_us(lambda _x: gr.replay(), xs)
    eager = eager_event_us(call, xs)
    host = host_us(lambda: call(xs[0]), n=10, loops=20)
    direct = host_us(direct_call, n=10, loops=20)  # the loaded kernel function alone
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for x in xs[:4]:
            call(x)
        torch.cuda.synchronize()
    kernel = [e.device_time_total / 4 for e in prof.key_averages() if e.device_time_total > 0]
    return {"case": f"{op} {fmt}" + (f" G={g}" if g else ""), "host_us": host, "direct_us": direct,
            "eager_us": eager, "graph1_us": graph1, "b2b_us": b2b, "kernel_us": kernel, "call": call}


def eager_split(args: argparse.Namespace) -> None:
    """Where an eager call's time goes, for plain quantize and quantize_grouped (16384x7168 bf16,
    out= given), us: `host` the Python call's own time (calls queued back to back, `host_us`),
    `direct` the loaded kernel function's alone (the TVM-FFI call and launch),
    `eager` one call event-timed on an idle queue (what run.py's grouped rows report), `graph1`
    one replay of a graph of that one call event-timed on an idle queue (launch + kernel, no host
    path), `b2b` the per-call time of back-to-back graph replays (run.py's kernel time),
    `kernel` the kernel's own duration in the profiler. eager - graph1 is the host path the GPU
    waits for; graph1 - b2b the launch and the overlap back-to-back calls get. Then the top
    functions of a cProfile of the eager calls, by own time."""
    import cProfile
    import io
    import pstats

    import torch

    from _timing import rotating_inputs

    xs = rotating_inputs(args.t, args.k)
    gen = torch.Generator().manual_seed(0)
    for op, fmt, g in EAGER_CASES:
        r = eager_split_row(op, fmt, g, xs, gen)
        print(f"{r['case']:24s} host {r['host_us']:7.1f}  direct {r['direct_us']:6.1f}  eager {r['eager_us']:7.1f}  "
              f"graph1 {r['graph1_us']:7.1f}  b2b {r['b2b_us']:7.1f}  "
              f"kernel {' + '.join(f'{x:.1f}' for x in r['kernel_us'])}")
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(20):
            r["call"](xs[0])
        pr.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(args.top)
        print("\n".join(line for line in buf.getvalue().splitlines() if line.strip()[:1].isdigit()))


LAUNCH_CASES = (("quantize", "mxfp8", 0), ("quantize", "nvfp4", 0), ("grouped", "mxfp8", 8), ("grouped", "nvfp4", 8))


def launch_cost(args: argparse.Namespace) -> None:
    """The loaded kernel function's own call (`hit.fn` of the out= fast path: the TVM-FFI call and
    the launch), us, per op at a tiny and a large size: `busy` calls queued back to back
    (`_timing.host_us`, as eager-split's `direct`), `idle` one call on a drained queue (median),
    and `python` the whole out= call back to back; `torch.add(out=)` at the tiny size for scale.
    A cost that grows with the kernel's size or only on a busy queue is the launch waiting on the
    GPU, not host work."""
    import torch

    from _timing import host_us

    def idle_us(f, calls: int = 41) -> float:
        times = []
        for _ in range(calls):
            torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            times.append((time.perf_counter() - t) * 1e6)
        return sorted(times)[calls // 2]

    gen = torch.Generator().manual_seed(0)
    rows = []
    for t, k in ((256, 256), (args.t, args.k)):
        x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
        for op, fmt, g in LAUNCH_CASES:
            call, direct = out_call(op, fmt, g, x, gen)  # makes one call: the warm-up
            torch.cuda.synchronize()
            row = {"case": f"{op} {fmt}" + (f" G={g}" if g else "") + f" {t}x{k}",
                   "busy": host_us(direct, n=10, loops=20),
                   "idle": idle_us(direct),
                   "python": host_us(lambda: call(x), n=10, loops=20)}
            rows.append(row)
            print(f"{row['case']:32s} direct busy {row['busy']:6.2f}  direct idle {row['idle']:6.2f}  "
                  f"out= call {row['python']:6.2f} us", flush=True)
    xa = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    ya = torch.empty_like(xa)
    add = host_us(lambda: torch.add(xa, xa, out=ya), n=10, loops=20)
    print(f"{'torch.add(out=) 256x256':32s} busy {add:6.2f} us")
    print(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows, "torch_add_us": add}))


def clocks(args: argparse.Namespace) -> None:
    """The SM clock, memory clock, power and clock-event reasons (`_clocks.sustained`: nvidia-smi
    sampled every 50 ms) while one case runs back to back for --seconds, beside its GPU time per
    call. Cases are `benchmarks/profile_kernels.py` cases, or `copy:M:K` (a device-to-device copy
    of an [M, K] bf16 tensor). A kernel that spends more energy per byte than a copy runs at a lower
    clock once the board's power cap is reached: what one Nsight Compute launch does not see.
    Prints a line per case, the board's limits and a JSON summary."""
    import torch

    from _clocks import call_of, limits, sustained

    rows = []
    for case in args.cases:
        row = {"case": case, **sustained(call_of(case), args.seconds, torch.cuda.current_device())}
        rows.append(row)
        print(f"{case:32s} {row['us_per_call']:9.1f} us/call  SM {row.get('sm_mhz', 0):.0f} MHz (min "
              f"{row.get('sm_mhz_min', 0):.0f})  mem {row.get('mem_mhz', 0):.0f} MHz  {row.get('power_w', 0):.0f} W  "
              f"{row.get('temp_c_max', 0):.0f} C  power cap in {row.get('power_capped_pct', 0):.0f}% of samples",
              flush=True)
    lim = limits(torch.cuda.current_device())
    print(f"enforced power limit W, max power limit W, max SM clock MHz: {lim}")
    print(json.dumps({"device": torch.cuda.get_device_name(), "limits": lim, "rows": rows}))


# --- command line -----------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="diag.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    summary = dict(line.split(None, 1) for line in __doc__.splitlines()[4:17])

    def add(name: str, fn) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=summary[name], description=fn.__doc__)
        p.set_defaults(fn=fn)
        return p

    p = add("first-call", first_call)
    p.add_argument("--op", default="quantize", choices=FIRST_CALL_OPS)
    p = add("startup-modes", startup_modes)
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--op", default="quantize", choices=FIRST_CALL_OPS)
    p.add_argument("--cpus", default="", help="comma-separated CPU numbers to pin the processes to (e.g. 3 or 2,3)")
    p = add("profile", profile)
    p.add_argument("--op", default="quantize_mxfp8", help="a bench_startup.py op (default quantize_mxfp8)")
    p.add_argument("--top", type=int, default=40)
    for name, fn in (("stages", stages), ("registration", registration)):
        p = add(name, fn)
        p.add_argument("--runs", type=int, default=8, help="fresh processes (default 8)")
    p = add("startup-stall", startup_stall)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--modes", default="on,nogc,eager,same,sleep,prefd,stages")
    add("alloc", alloc)
    p = add("ones", ones)
    p.add_argument("--how", default="side_stream,current_stream,pinned,fill",
                   help="comma-separated: side_stream, current_stream, pinned, fill")
    p.add_argument("--runs", type=int, default=1, help="fresh processes per way (default 1)")
    p = add("dual-unswizzle", dual_unswizzle)
    p.add_argument("--torch-pass", action="store_true")
    p = add("wheel-signature", wheel_signature)
    p.add_argument("--site", required=True, help="the site dir the kernel wheel is installed in")
    p.add_argument("--runs", type=int, default=10)
    p = add("eager-split", eager_split)
    p.add_argument("--t", type=int, default=16384)
    p.add_argument("--k", type=int, default=7168)
    p.add_argument("--top", type=int, default=8)
    p = add("launch-cost", launch_cost)
    p.add_argument("--t", type=int, default=16384)
    p.add_argument("--k", type=int, default=7168)
    p = add("clocks", clocks)
    p.add_argument("cases", nargs="+", help="profile_kernels.py cases or copy:M:K")
    p.add_argument("--seconds", type=float, default=3.0, help="back-to-back time per case (default 3)")
    return ap


def main() -> None:
    args = parser().parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
