"""`kernelforge tune`'s measurement of the columnwise op's staging rule on this GPU.

Linear block scales of a columnwise or dual call come either from the direct linear kernel or
from the swizzled kernel followed by the `scale_layout` pass (`kernelforge.families.scale_layout.
staging` says why the faster one differs between cards). For each format and output set this
times both paths (CUDA-graph replays over fresh bf16 inputs beyond 4x L2, as the tuner times
builds) on a ladder of input sizes, checks that both wrote the same bytes, and records the
smallest size from which the staged path is faster by at least `MIN_GAIN` at that size and every
larger one (None: the direct kernel at every size). The tuning table keeps it as `staging`.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import KernelNotBuilt
from ..families.quantize_columnwise.op import dispatch_coords
from ..families.scale_layout import op as scale_layout
from ..families.scale_layout.staging import PAIRS, pair_name, staged_shape
from ..formats import FORMATS
from ..ops import checks, launch
from ..runtime.tuning import STAGING_OPS
from ..sources import source_hash
from ..testing import rotating_inputs
from .measure import MIN_GAIN, gpu_us

# M x K of the ladder: 2^23, then 2^24 to 2^27 elements in steps of at most 1.5x (a threshold between two sizes
# is placed at the larger: the closer the steps, the less a call near the crossover loses): whole
# 32-byte scale sectors for every format (the pass's K-class), both sides of every threshold
# measured so far (docs/performance.md).
LADDER = ((2048, 4096), (4096, 4096), (4096, 6144), (4096, 8192), (6144, 8192), (8192, 8192), (12288, 8192),
          (16384, 8192))
DTYPE = "bfloat16"  # what training stacks quantize; the rule is per format and output set


def group_key(fmt_name: str, outputs: str) -> str:
    """The dispatch group of the direct linear build a pair's measurement stands for (what
    `tune --only` globs match)."""
    mode = checks.format_plan(fmt_name, "linear", "floor")[1]  # the op's default scale mode
    return (f"quantize_columnwise|dtype={DTYPE},format={fmt_name},layout=linear,outputs={outputs},"
            f"scale_mode={mode},transform=none")


def paths(fmt_name: str, rowwise: bool, x: torch.Tensor) -> tuple[Callable, Callable, tuple]:
    """(direct, staged, outputs): the two linear-scale paths of one call shape as callables of an
    input like `x`, and the outputs both write (from an allocating call). KernelNotBuilt when the
    cache lacks the direct build, the swizzled build or the pass."""
    import kernelforge

    fmt, mode, _, _ = checks.format_plan(fmt_name, "linear", "floor")  # the op's default scale mode
    g = torch.ones(1, dtype=torch.float32, device=x.device) if fmt.has_global_scale else None
    outs = kernelforge.quantize(x, fmt_name, layout="linear", columnwise=True, rowwise=rowwise, global_scale=g)
    m, k = x.shape
    where = (x.device.index, k, fmt.block, x.data_ptr(), k * x.element_size(), m)
    direct = launch.kernel_for("quantize_columnwise", dispatch_coords(DTYPE, fmt, "linear", rowwise, mode, "none"),
                               *where)
    swizzled = launch.kernel_for("quantize_columnwise",
                                 dispatch_coords(DTYPE, fmt, "swizzled", rowwise, mode, "none"), *where)
    linear = tuple(outs[1::2])
    staged = scale_layout.staged_call(swizzled, scale_layout.pass_kernel(linear[0]), linear)
    garg = checks.global_scale_arg(fmt, g, x.device)
    data, scale = (outs[0], outs[1]) if rowwise else (None, None)

    def bind(fn: Callable) -> Callable:
        return lambda x: fn(x, data, scale, outs[-2], outs[-1], garg, garg, 0)

    return bind(direct), bind(staged), tuple(outs)


def measure_pair(fmt_name: str, outputs: str, l2_bytes: int, log: Callable[[str], None]) -> tuple[int | None, dict]:
    """(the smallest ladder size, in elements, from which staging wins; its timings per size)."""
    rowwise = outputs == "dual"
    block = FORMATS[fmt_name].block
    timings: dict[str, dict[str, float]] = {}
    measured: list[tuple[int, float, float]] = []
    for m, k in LADDER:
        if not staged_shape(fmt_name, block, m, k, rowwise, "none", {pair_name(fmt_name, outputs): 0}):
            raise AssertionError(f"ladder shape {m}x{k} cannot be staged for {fmt_name} {outputs}")
        r = rotating_inputs({"format": fmt_name, "dtype": DTYPE, "layout": "linear"}, m, k, l2_bytes)
        xs = r.inputs()
        direct, staged, outs = paths(fmt_name, rowwise, xs[0])
        written = []
        for fn in (direct, staged):
            for t in outs:
                t.view(torch.uint8).fill_(0xA5)
            fn(xs[0])
            written.append([t.view(torch.uint8).clone() for t in outs])
        if not all(torch.equal(a, b) for a, b in zip(*written)):
            raise RuntimeError(f"{fmt_name} {outputs} {m}x{k}: the staged and the direct path wrote different bytes")
        us = {name: gpu_us([lambda x=x, fn=fn: fn(x) for x in xs]) for name, fn in (("direct", direct),
                                                                                   ("staged", staged))}
        timings[f"{m}x{k}"] = {name: round(t, 3) for name, t in us.items()}
        measured.append((m * k, us["direct"], us["staged"]))
        log(f"staging {pair_name(fmt_name, outputs)} {m}x{k}: direct {us['direct']:.1f} us, "
            f"staged {us['staged']:.1f} us")
        del xs, r, outs
        torch.cuda.empty_cache()
    return staged_from(measured), timings


def staged_from(measured: list[tuple[int, float, float]]) -> int | None:
    """The smallest size (elements) of `measured` ((elements, direct us, staged us), ascending) from
    which the staged path is faster by at least MIN_GAIN at every size: it must earn its extra
    launch and scratch buffer, and a tie keeps the direct kernel. None: not at the largest size."""
    threshold = None
    for elements, direct, staged in reversed(measured):
        if staged * (1 + MIN_GAIN) > direct:
            break
        threshold = elements
    return threshold


def measure_staging(only: str, l2_bytes: int, log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """The `staging` section of a tuning table: every pair whose direct linear dispatch group
    (`group_key`) matches `only` and whose builds the cache holds; None when no pair was measured."""
    min_elements: dict[str, int | None] = {}
    timings: dict[str, Any] = {}
    for fmt_name, outputs in PAIRS:
        if not fnmatch.fnmatch(group_key(fmt_name, outputs), only):
            continue
        name = pair_name(fmt_name, outputs)
        try:
            min_elements[name], timings[name] = measure_pair(fmt_name, outputs, l2_bytes, log)
        except KernelNotBuilt as exc:
            log(f"staging {name}: not measured, a build is missing ({str(exc).splitlines()[0]})")
            continue
        log(f"staging {name} -> " + (f"staged from {min_elements[name]} elements" if min_elements[name] is not None
                                     else "direct at every size"))
    if not min_elements:
        return None
    return {"min_elements": min_elements, "timings_us": timings}


def add_staging(table: dict[str, Any], root: Path, only: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """`table` (a `tune` run's, on the cache at `root`) with this GPU's staging rule measured on
    the same cache's builds (`measure_staging`), and the kernel sources of both ops it rests on;
    `table` unchanged when no pair matched `only` or had its builds."""
    launch.set_cache_root(root)  # the op's calls dispatch to the cache being tuned, as the pools do
    dev = torch.cuda.current_device()
    staging = measure_staging(only, torch.cuda.get_device_properties(dev).L2_cache_size, log)
    if staging is None:
        return table
    return {**table, "staging": staging,
            "sources": {**table["sources"], **{op: source_hash(op) for op in STAGING_OPS}}}
