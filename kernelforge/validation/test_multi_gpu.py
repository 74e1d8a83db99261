"""Several GPUs in one process (needs 2 CUDA devices; conftest.py leaves this file out of the
collection on fewer, so `kernelforge validate` does not count it as a skip there).

What is checked, with cuda:0 the current device throughout unless a test says otherwise:
* every public op on cuda:1 gives the bytes of the same op on cuda:0 (same inputs copied), and
  leaves cuda:0 current (the kernel wrapper's own device guard; see kernelforge/ops/checks.py, check_launch_device);
* fresh processes whose first kernel call is on cuda:1 (then cuda:0), and the reverse: one
  loaded module (and its one cubin library load) serves both devices;
* torch's current stream of cuda:1 is the one used: a producer on a side stream of cuda:1,
  behind a long sleep, is ordered before an op called while that side stream is cuda:1's
  current stream and cuda:0 the current device;
* the out= fast path and its memo with the same shapes on cuda:0, cuda:1, cuda:0 (distinct buffers);
* 2 threads, each driving its own device for 50 calls, concurrently, in a fresh process;
* CUDA graphs: a capture on a stream of cuda:1 records an op called while cuda:0 is current
  (replays match eager); a capture on cuda:0's stream refuses an op on cuda:1 with a RuntimeError;
* mixed-device arguments on real devices: a ValueError naming the argument and both devices.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernelforge

sys.path.insert(0, str(Path(__file__).parent))
import _multi_gpu_ops as mg  # noqa: E402

pytestmark = pytest.mark.gpu
HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def current_is_0():
    """cuda:0 current at the start and end of every test."""
    prev = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "an op left another device current"
    torch.cuda.set_device(prev)


@pytest.fixture(scope="module")
def expected():
    """Every op's bytes on cuda:0 (the current device)."""
    torch.cuda.set_device(0)
    return mg.run_all(mg.to_device(mg.cpu_inputs(), "cuda:0"))


@pytest.mark.parametrize("op", mg.OPS)
def test_op_on_cuda1_equals_cuda0(expected, op):
    inp = mg.to_device(mg.cpu_inputs(), "cuda:1")
    outs = mg.OPS[op](inp)
    assert torch.cuda.current_device() == 0
    assert all(o.device == torch.device("cuda:1") for o in outs), [str(o.device) for o in outs]
    assert not mg.diff({op: mg.as_bytes(outs)}, {op: expected[op]}), f"{op}: cuda:1 bytes differ from cuda:0"


FRESH = """
import sys, torch
sys.path.insert(0, {here!r})
import _multi_gpu_ops as mg
torch.cuda.set_device(0)
first, second = {order}
res = {{}}
for d in (first, second):
    res[d] = mg.run_all(mg.to_device(mg.cpu_inputs(), f"cuda:{{d}}"))
    assert torch.cuda.current_device() == 0, f"current device changed after the calls on cuda:{{d}}"
bad = mg.diff(res[1], res[0])
print("DIFFER:", bad) if bad else print("OK")
"""


def _run(script: str, timeout: int = 300) -> str:
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.parametrize("order", [(1, 0), (0, 1)], ids=["cuda1-first", "cuda0-first"])
def test_fresh_process_first_call_on_either_device(order):
    """The first call of each kernel in the process on cuda:1 (resp. cuda:0), then the other:
    a module loaded once that could only launch where it was first used fails here."""
    out = _run(FRESH.format(here=str(HERE), order=order))
    assert out.strip().endswith("OK"), out


STREAM_OPS = ["quantize_nvfp4", "columnwise_nvfp4", "rht", "rmsnorm_mxfp8", "add_rmsnorm_nvfp4",
              "experts_nvfp4", "grouped_nvfp4"]


@pytest.mark.parametrize("op", STREAM_OPS)
def test_side_stream_of_cuda1_orders_the_producer(expected, op):
    """The inputs on cuda:1 are zeros until a producer on a side stream of cuda:1 writes them,
    behind a ~0.1 s sleep; the op is then called with that side stream current on cuda:1 and
    cuda:0 the current device. Had it run on another stream of cuda:1 it would read zeros."""
    real = mg.to_device(mg.cpu_inputs(), "cuda:1")
    inp = {k: torch.zeros_like(v) for k, v in real.items()}
    torch.cuda.synchronize(1)
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):  # makes cuda:1 current, side its current stream
        torch.cuda._sleep(200_000_000)
        for k, v in real.items():
            inp[k].copy_(v)
        with torch.cuda.device(0):
            assert torch.cuda.current_device() == 0
            assert torch.cuda.current_stream(1) == side
            outs = mg.OPS[op](inp)
        side.synchronize()
    assert not mg.diff({op: mg.as_bytes(outs)}, {op: expected[op]}), f"{op}: not ordered after the producer"


FAST = {  # the ops with an out= fast path (out=None: fresh outputs)
    "quantize": lambda i, out: kernelforge.quantize(i["x"], "nvfp4", out=out),  # the per-device cached [1.0]
    "rmsnorm": lambda i, out: kernelforge.rmsnorm_quantize(i["x"], i["weight"], "mxfp8", scale_mode="rceil", out=out),
    "columnwise": lambda i, out: kernelforge.quantize(i["x"], "nvfp4", rowwise=False, columnwise=True,
                                                      global_scale=i["g"], layout="swizzled", out=out),
}


@pytest.mark.parametrize("op", FAST)
def test_out_fast_path_across_devices(forbid_checked_path, op):
    """Same shapes on cuda:0, cuda:1, cuda:0 into distinct buffers; each repeat (served by the
    fast path: the checked path is forbidden) writes the right bytes into its own buffers."""
    call = FAST[op]
    cpu = mg.cpu_inputs()
    want = {d: mg.as_bytes(call(mg.to_device(cpu, f"cuda:{d}"), None)) for d in (0, 1)}
    assert not mg.diff({"a": want[1]}, {"a": want[0]})
    plan = [0, 1, 0]
    inps = [mg.to_device(cpu, f"cuda:{d}") for d in plan]
    bufs = [tuple(torch.empty_like(o) for o in call(i, None)) for i in inps]
    for i, b in zip(inps, bufs):
        call(i, b)  # checked: remembered
    for rnd in range(2):
        for d, i, b in zip(plan, inps, bufs):
            for t in b:
                t.view(torch.uint8).fill_(0xA5)
            with forbid_checked_path():
                res = call(i, b)
            assert all(r is t for r, t in zip(res, b))
            assert not mg.diff({"a": mg.as_bytes(b)}, {"a": want[d]}), f"round {rnd}: cuda:{d} buffers wrong"


THREADS = """
import sys, threading, torch
sys.path.insert(0, {here!r})
import _multi_gpu_ops as mg
import kernelforge
NAMES = ["quantize_nvfp4", "rmsnorm_mxfp8", "dual_mxfp8", "grouped_nvfp4", "experts_nvfp4"]
inps = [mg.to_device(mg.cpu_inputs(), f"cuda:{{d}}") for d in (0, 1)]
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
start = threading.Barrier(2)
got = [[], []]
errors = []

def drive(d):
    try:
        # no set_device: the thread's current device is cuda:0 for both
        start.wait()
        i = inps[d]
        out = None
        for n in range(50):
            outs = {{name: mg.OPS[name](i) for name in NAMES}}
            if out is None:
                out = tuple(torch.empty_like(o) for o in outs["quantize_nvfp4"])
            kernelforge.quantize(i["x"], "nvfp4", layout="swizzled", global_scale=i["g"], out=out)  # fast path
            outs["fast"] = tuple(o.clone() for o in out)
            got[d].append(outs)
        torch.cuda.synchronize(d)
    except BaseException as e:
        errors.append(f"cuda:{{d}}: {{e!r}}")

ts = [threading.Thread(target=drive, args=(d,)) for d in (0, 1)]
for t in ts: t.start()
for t in ts: t.join()
assert not errors, errors
want = {{name: mg.as_bytes(mg.OPS[name](inps[0])) for name in NAMES}}
want["fast"] = want["quantize_nvfp4"]
bad = []
for d in (0, 1):
    assert len(got[d]) == 50
    for n, outs in enumerate(got[d]):
        diff = mg.diff({{k: mg.as_bytes(v) for k, v in outs.items()}}, want)
        if diff: bad.append((d, n, diff))
print("DIFFER:", bad[:10]) if bad else print("OK")
"""


def test_two_threads_drive_two_devices():
    """2 threads start together in a fresh process (their first calls race through the module
    loads), each calling 5 ops and the out= fast path 50 times on its own device."""
    out = _run(THREADS.format(here=str(HERE)), timeout=600)
    assert out.strip().endswith("OK"), out


def test_cuda_graph_captured_on_cuda1_while_cuda0_is_current():
    """A capture on a stream of cuda:1, the ops called with cuda:0 current: recorded into the
    graph (cuda:1's current stream is the capture stream); replays on new inputs equal eager."""
    inp = mg.to_device(mg.cpu_inputs(), "cuda:1")
    q = kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"])
    r = kernelforge.rmsnorm_quantize(inp["x"], inp["weight"], "mxfp8", scale_mode="rceil")
    # warm-up into the very buffers: modules loaded and calls remembered outside the capture
    kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"], out=q)
    kernelforge.rmsnorm_quantize(inp["x"], inp["weight"], "mxfp8", scale_mode="rceil", out=r)
    torch.cuda.synchronize(1)
    graph = torch.cuda.CUDAGraph()
    s1 = torch.cuda.Stream(device=1)
    with torch.cuda.graph(graph, stream=s1):  # cuda:1 current inside (torch.cuda.stream)
        with torch.cuda.device(0):
            kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"], out=q)
            kernelforge.rmsnorm_quantize(inp["x"], inp["weight"], "mxfp8", scale_mode="rceil", out=r)
    for step in range(3):
        inp["x"].copy_(torch.randn_like(inp["x"]) * (step + 2))
        inp["g"].copy_(kernelforge.nvfp4_global_scale(inp["x"]))
        for t in (*q, *r):
            t.view(torch.uint8).fill_(0xA5)
        torch.cuda.synchronize(1)
        graph.replay()
        torch.cuda.synchronize(1)
        eq = kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"])
        er = kernelforge.rmsnorm_quantize(inp["x"], inp["weight"], "mxfp8", scale_mode="rceil")
        assert not mg.diff({"q": mg.as_bytes(q), "r": mg.as_bytes(r)}, {"q": mg.as_bytes(eq), "r": mg.as_bytes(er)}), \
            f"replay {step} differs from eager"


@pytest.mark.parametrize("fresh", [False, True], ids=["out", "fresh-outputs"])
def test_capture_on_cuda0_refuses_an_op_on_cuda1(fresh):
    """Capturing cuda:0's current stream, an op on cuda:1 would run eagerly on cuda:1's stream,
    missing from the graph: refused with a RuntimeError, nothing launched on cuda:1."""
    inp = mg.to_device(mg.cpu_inputs(), "cuda:1")
    q = kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"])
    kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"], out=q)  # remembered
    for t in q:
        t.view(torch.uint8).fill_(0xA5)
    torch.cuda.synchronize(1)
    y0 = torch.zeros(16, device="cuda:0")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"^x: is on cuda:1, but a CUDA graph is being captured on the current "
                                           r"stream of cuda:0"):
        with torch.cuda.graph(graph):
            y0.add_(1)
            kernelforge.quantize(inp["x"], "nvfp4", layout="swizzled", global_scale=inp["g"],
                                 out=None if fresh else q)
    torch.cuda.synchronize(1)
    assert all(bool((t.view(torch.uint8) == 0xA5).all()) for t in q), "something was written on cuda:1"


def test_mixed_devices_on_real_devices():
    a = mg.to_device(mg.cpu_inputs(), "cuda:0")
    b = mg.to_device(mg.cpu_inputs(), "cuda:1")
    cases = [
        (lambda: kernelforge.quantize(b["x"], "nvfp4", global_scale=a["g"]), "global_scale", 1, 0, "x"),
        (lambda: kernelforge.quantize(a["x"], "nvfp4", out=kernelforge.quantize(b["x"], "nvfp4")), "out[0] (data)", 0, 1, "x"),
        (lambda: kernelforge.rmsnorm_quantize(b["x"], a["weight"], "mxfp8"), "weight", 1, 0, "x"),
        (lambda: kernelforge.add_rmsnorm_quantize(a["x"], b["residual"], a["weight"], "mxfp8"), "residual", 0, 1, "x"),
        (lambda: kernelforge.quantize_nvfp4_rht(b["x"], global_scale_col=a["g"]), "global_scale_col", 1, 0, "x"),
        (lambda: kernelforge.quantize_experts(b["w"], "nvfp4", global_scale=a["g_experts"]), "global_scale", 1, 0, "w"),
        (lambda: kernelforge.quantize_grouped(b["x"], a["offsets"], "nvfp4"), "group_offsets", 1, 0, "x"),
    ]
    for call, name, dx, do, arg in cases:
        with pytest.raises(ValueError) as exc:
            call()
        assert str(exc.value) == f"{name}: expected a tensor on cuda:{dx} (the device of {arg}), got cuda:{do}"
