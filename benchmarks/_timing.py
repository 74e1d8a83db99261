"""GPU timing helpers shared by the benchmarks: CUDA events, CUDA-graph replay, copy bandwidth."""
from __future__ import annotations

import time

import torch

L2_BYTES = 50 * 2**20


# Cycles of GPU spin queued before each timed call (about 100 us on an H100): the GPU is still busy
# when the host has queued the start event and the work, so the host's launch latency (several us
# for a CUDA-graph replay) is not counted as GPU time.
PRIME_CYCLES = 200_000

# Back-to-back calls per CUDA graph and timed replays of it, where a caller of graph_us passes
# neither (benchmarks/run.py --quick lowers them with set_rounds).
ROUNDS = {"calls": 20, "replays": 20}


def set_rounds(calls: int, replays: int) -> None:
    """Default calls per graph and replays of graph_us for this process."""
    ROUNDS.update(calls=calls, replays=replays)


def bench_us(fn, *, iters: int = 50, warmup: int = 5) -> float:
    """Median GPU time of fn() in microseconds, CUDA events around each call (queue primed)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(PRIME_CYCLES)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    times.sort()
    return times[len(times) // 2]


def graph_us(fn, *, calls: int | None = None, replays: int | None = None) -> float:
    """Median GPU time per call from CUDA-graph replays of `calls` back-to-back calls (no host overhead);
    `calls` and `replays` default to ROUNDS."""
    calls = ROUNDS["calls"] if calls is None else calls
    replays = ROUNDS["replays"] if replays is None else replays
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return bench_us(g.replay, iters=replays, warmup=3) / calls


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written) on a 2 GiB buffer."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = bench_us(lambda: dst.copy_(src), iters=20)
    return 2 * src.numel() / us / 1e3


def same_size_copy_us(nbytes: int) -> float:
    """GPU time (us, CUDA-graph replay) of a device-to-device copy that moves `nbytes` (half read,
    half written), its sources rotated beyond L2: what a kernel moving those bytes can hope for at
    that size (launch and ramp-up included), where the 2 GiB copy measures the sustained rate."""
    srcs = rotating_inputs(1, max(1, nbytes // 4))  # bf16: nbytes / 2 per copy
    dst = torch.empty_like(srcs[0])
    it = iter(range(10**9))
    return graph_us(lambda: dst.copy_(srcs[next(it) % len(srcs)]))


def io_bytes(*tensors) -> int:
    """Bytes of the given tensors (tuples and lists of them flattened, None skipped): what "input
    read + all outputs written" counts when passed the inputs and every output of one call."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += io_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def rotating_inputs(m: int, k: int, dtype: torch.dtype = torch.bfloat16, cap: int = 16) -> list[torch.Tensor]:
    """Enough [m, k] random inputs to cycle through more than 4x the L2 size (at most `cap`)."""
    n = max(2, (4 * L2_BYTES) // (m * k * 2) + 1)
    return [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(min(n, cap))]


def host_us(f, *, n: int = 200, loops: int = 50) -> float:
    """Host time per call of f() in microseconds: best of `loops` timed runs of n calls.

    The GPU is drained between runs and n stays well below the launch queue's depth, so a
    full queue never throttles the host and this is the host's own cost, not GPU time.
    """
    for _ in range(n):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(loops):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return best


def eager_event_us(fn, xs: list, calls: int = 21) -> float:
    """Median GPU-clock time of one eager call `fn(x)` on an idle queue, between CUDA events
    recorded right before and after it: the host's launch path (the GPU waits for it) plus the
    kernel. Against the graph-replayed time of the same call it gives the eager call's host cost."""
    times = []
    for i in range(calls):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(xs[i % len(xs)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]
