"""`kernelforge tune`: time every build candidate on this GPU and store the winners in the cache.

For each dispatch group, K-class and bucket of M, every build of that K-class (the candidates
differ only in tuning axes) runs on the same inputs: CUDA-graph replays of back-to-back calls
over enough inputs to exceed 4x the L2 cache. The fastest build's tuning values (the family
heuristic's pick where no build beats it by `MIN_GAIN`) go into a table
keyed by device name and arch, together with each op's kernel source hash; the table is
published into the cache as a checksummed entry of kind "tuning" (listed by `cache ls`, checked
by `cache verify`; see `kernelforge.build.tables`) and read by the runtime (runtime/tuning.py). The ops tuned are the op
families with tuning axes and timing calls (`OpFamily.timing_calls`), built-in or plugin.
"""
from __future__ import annotations

import datetime
import fnmatch
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

from ..formats import FORMATS
from ..registry import OpFamily, families, get_family
from ..runtime.arch import arch_runs_on, arch_specific
from ..runtime.dispatch import Candidate, DispatchTable
from ..runtime.tuning import BUCKET_SAMPLE_M, M_BUCKETS, SCHEMA, heuristic_rank, tuning_values
from ..sources import source_hash


def tuned_families() -> dict[str, OpFamily]:
    """The op families `tune` times: those with tuning axes and timing calls."""
    return {name: f for name, f in families().items() if f.tuning_axes and f.timing_calls is not None}


# A candidate replaces the family's heuristic pick only when it is at least this much faster at
# the sample M: equal candidates differ by noise, and without a margin noise would decide the
# table.
MIN_GAIN = 0.02


def pick(us: list[float], heuristic: int) -> int:
    """Index of the winning candidate: the fastest, unless the heuristic's pick (index
    `heuristic`) is within MIN_GAIN of it."""
    best = min(range(len(us)), key=us.__getitem__)
    return heuristic if us[heuristic] <= us[best] * (1 + MIN_GAIN) else best


def gpu_us(calls: list[Callable[[], Any]], replays: int = 10) -> float:
    """Median GPU time per call of one CUDA-graph replay of `calls` (run back to back)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in calls:
            f()
    times = []
    for i in range(replays + 2):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(b) * 1000 / len(calls))
    return sorted(times)[len(times) // 2]


def problem_k(op: str, cand: Candidate, block: int) -> int:
    """The K (or H) a K-class is timed at: its bound, or 4096 (one block less where the class
    admits K that is not a multiple of 4 blocks, the case it exists for)."""
    kc = cand.kclass
    if kc.max_k:
        return kc.max_k
    return 4096 if kc.k_multiple_blocks % 4 == 0 else 4096 - block


def problem_ks(op: str, cand: Candidate, block: int) -> list[int]:
    """The K values a K-class is timed at: `problem_k`, and for a bounded class also 3/4 of its
    bound (H = 1536 in h2k, 6144 in h8k, ...): a row with fewer blocks than the class is laid
    out for leaves some of every candidate's threads idle, in different proportions, so the
    choice should not rest on the class bound alone."""
    k = problem_k(op, cand, block)
    if not cand.kclass.max_k:
        return [k]
    step = block * cand.kclass.k_multiple_blocks
    return [k, max(step, (3 * k // 4) // step * step)]


def make_calls(op: str, coords: dict[str, str], fn: Callable, m: int, k: int, l2_bytes: int) -> list[Callable]:
    """Calls of `fn` on rotating fresh inputs of shape [m, k] (at least 4x L2 in total): the op
    family's timing calls."""
    timing = get_family(op).timing_calls
    if timing is None:
        raise ValueError(f"op {op!r} has no timing calls (its family is not tuned)")
    return timing(coords, fn, m, k, l2_bytes)


class Pool(NamedTuple):
    """The candidates `tune` times against each other: one dispatch group's builds of one K-class
    and arch, with the K values they are timed at, their tuning values and the heuristic's pick."""

    group: str
    op: str
    kclass: str
    arch: str
    cands: list[Candidate]
    coords: dict[str, Any]
    ks: list[int]
    values: list[dict[str, Any]]
    default: int  # index of the family heuristic's pick


def candidate_pools(table: DispatchTable, only: str, cap: tuple[int, int]) -> Iterator[Pool]:
    """Every pool of two or more candidates of the tuned ops' dispatch groups matching `only` that
    run on a GPU of compute capability `cap`, in group and K-class order."""
    tuned = tuned_families()
    for group, cands in sorted(table.groups().items()):
        op = group.split("|", 1)[0]
        if op not in tuned or not fnmatch.fnmatch(group, only):
            continue
        pools: dict[tuple[str, str], list[Candidate]] = {}
        for cand in cands:
            if arch_runs_on(cand.arch, cap):
                pools.setdefault((cand.kclass.name, cand.arch), []).append(cand)
        for (kc_name, arch), pool in sorted(pools.items()):
            if len(pool) < 2:
                continue
            coords = dict(pool[0].entry["extra"]["dispatch"])
            values = [tuning_values(op, p.entry["variant"]["axes"]) for p in pool]
            yield Pool(group, op, kc_name, arch, pool, coords, problem_ks(op, pool[0], FORMATS[coords["format"]].block),
                       values, min(range(len(pool)), key=lambda i: heuristic_rank(op, pool[i].kclass.max_k, values[i])))


def time_pool(pool: Pool, fns: list[Callable], m: int, l2_bytes: int) -> list[float]:
    """Each candidate's GPU time (us) at M = m: the least total over the class's sample K values."""
    us = [sum(gpu_us(make_calls(pool.op, pool.coords, fn, m, k, l2_bytes)) for k in pool.ks) for fn in fns]
    torch.cuda.empty_cache()
    return us


def describe(pool: Pool, m: int, us: list[float]) -> str:
    """One log line of a pool timed at M = m: the group, K-class, sample K values and each
    candidate's tuning values with its time."""
    return (f"{pool.group} {pool.kclass} M={m} K={'+'.join(map(str, pool.ks))}: "
            + ", ".join(f"{json.dumps(v, sort_keys=True)} {t:.1f} us" for v, t in zip(pool.values, us)))


def tune(root: Path, device_label: str | None = None, only: str = "*",
         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Time every candidate in the cache at `root` on the current GPU; return the table."""
    dev = torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(dev)
    device = device_label or torch.cuda.get_device_name(dev)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    table = DispatchTable(root)
    choices: dict[str, dict[str, list[dict[str, Any] | None]]] = {}
    timings: dict[str, dict[str, list[dict[str, float]]]] = {}
    archs, toolchains = set(), set()
    for pool in candidate_pools(table, only, cap):
        group, kc_name, values = pool.group, pool.kclass, pool.values
        archs.add(pool.arch)
        toolchains.update(p.entry.get("toolchain_id", "") for p in pool.cands)
        fns = [table.load(p) for p in pool.cands]
        per_bucket, times = [], []
        for m in BUCKET_SAMPLE_M:
            us = time_pool(pool, fns, m, l2)
            best = pick(us, pool.default)
            per_bucket.append(values[best])
            times.append({json.dumps(v, sort_keys=True): round(t, 3) for v, t in zip(values, us)})
            log(describe(pool, m, us) + f" -> {values[best]}")
        choices.setdefault(group, {})[kc_name] = per_bucket
        timings.setdefault(group, {})[kc_name] = times
    if len(archs) > 1:
        raise RuntimeError(f"candidates of several arches ran here ({sorted(archs)}); tune one arch per cache")
    decided = {g.split("|", 1)[0] for g in choices}
    # The toolchain of the builds timed, when there was exactly one (the schema's toolchain_id is
    # a non-empty string or absent).
    toolchain = {"toolchain_id": next(iter(toolchains))} if len(toolchains) == 1 and "" not in toolchains else {}
    return {"schema": SCHEMA, "device": device, "arch": next(iter(archs), arch_specific(cap)),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **toolchain,
            "m_buckets": list(M_BUCKETS), "bucket_sample_m": list(BUCKET_SAMPLE_M),
            # Only the ops the table decides for: a table that named an op without choices went
            # stale (and failed tests/runtime/test_tuning.py) whenever that op's kernel changed.
            "sources": {op: source_hash(op) for op in tuned_families() if op in decided},
            "choices": choices, "timings_us": timings}
