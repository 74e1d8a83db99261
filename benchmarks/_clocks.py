"""The SM clock and board power while a call runs back to back: `nvidia-smi` sampled every 50 ms.

Both Hopper boards cap their power (700 W on the SXM parts): a kernel that spends more energy per
byte than a copy (instructions, register traffic) runs at a lower SM clock once the cap is reached,
which one cold Nsight Compute launch does not show. Clock-event reason bit 0x4 is the software power
cap (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html). The clock and the
reasons are read as they are at each sample; `power.draw` is the driver's average over about the last
second (https://arxiv.org/abs/2312.02741 measures how it is sampled), so a case shorter than a few
seconds reads part of what ran before it.
"""
from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable

FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
POWER_CAP = 0x4


def call_of(case: str) -> Callable[[], object]:
    """The call a case names: `copy:M:K` (a device-to-device copy of an [M, K] bf16 tensor, the
    bandwidth reference) or a `benchmarks/profile_kernels.py` case."""
    import torch

    if case.startswith("copy:"):
        _, m, k = case.split(":")
        src = torch.randn(int(m), int(k), device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    from profile_kernels import case_fn

    return case_fn(case)


def limits(device: int = 0) -> str:
    """'enforced power limit W, max power limit W, max SM clock MHz' of the board, as nvidia-smi prints it."""
    return subprocess.run(["nvidia-smi", "--query-gpu=enforced.power.limit,power.max_limit,clocks.max.sm",
                           "--format=csv,noheader,nounits", "-i", str(device)],
                          capture_output=True, text=True).stdout.strip()


GRAPH_CALLS = 20  # calls captured in one CUDA graph: replays keep the GPU busy, as the benchmark's timing does


def sustained(fn: Callable[[], object], seconds: float = 2.0, device: int = 0) -> dict:
    """Replay a CUDA graph of GRAPH_CALLS calls of fn back to back for `seconds` while sampling the
    board (eager calls of a small case would leave the GPU idle between kernels, at the host's
    pace); the first quarter of the samples (the clock settling) is dropped. Returns us per call
    (CUDA events over the loop), the median and lowest SM clock, the median memory clock and power,
    the highest temperature, the share of samples with the power cap active and every reason mask
    seen (`summary`)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    sampler = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                "-lms", "50", "-i", str(device)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, t0 = 0, time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(5):
            graph.replay()
        calls += 5 * GRAPH_CALLS
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    sampler.terminate()
    out, _ = sampler.communicate()
    return {"us_per_call": start.elapsed_time(end) * 1e3 / calls, **summary(out)}


def summary(out: str) -> dict:
    """The figures of `sustained` from nvidia-smi's CSV lines (FIELDS, no header, no units): the
    first quarter of the samples (the clock settling) is dropped; {"samples": 0} if none is left."""
    rows = [[v.strip() for v in line.split(",")] for line in out.strip().splitlines()]
    rows = [r for r in rows if len(r) == 5 and r[0].isdigit()]
    rows = rows[len(rows) // 4:]
    if not rows:
        return {"samples": 0}
    sm, mem, watts, temp = ([float(r[i]) for r in rows] for i in range(4))
    reasons = [int(r[4], 16) for r in rows]
    return {"samples": len(rows), "sm_mhz": statistics.median(sm), "sm_mhz_min": min(sm),
            "mem_mhz": statistics.median(mem), "power_w": statistics.median(watts), "temp_c_max": max(temp),
            "power_capped_pct": 100.0 * sum(bool(m & POWER_CAP) for m in reasons) / len(reasons),
            "reasons": sorted({f"{m:#x}" for m in reasons})}
