"""Why the missed host-side targets of issue 33 miss, measured on the GPU machine by the run that
missed them (what `evidence.py` is for the kernel targets): numbers, each from its own probe.

* First call <= 25 ms, and the wheel within 2 ms of a directory: `diag.py first-call` (the
  `quantize(x, "mxfp8")` call of the startup rows) in fresh processes, alternated between the
  default layers and `--startup-cache-dir` when given. Per source: min / median / max of import +
  first call, the CPU time of the process over its wall time (about 1: the time is CPU work,
  nothing was waited for), and the median of every stage: the package, the op families, the
  runtime modules, the op modules with their torch.library registration, the cache layers
  (kernel wheels found, signatures checked), and the first call split into resolving the build,
  loading it (the verified runtime library and module) and the rest (checks, outputs, launch).
* Eager grouped call within 15 us of its graph-replayed time: `diag.py eager-split` of the worst
  cell and of plain quantize in its format (16384 x 7168, out= given), in a fresh process: the
  Python call's host time, the loaded kernel function alone, one eager call, one graph replay and
  back-to-back replays, all on an idle queue as the grouped rows time them.
* Allocating tiny call <= 1.5x `torch.add(out=)`: host time per call of `torch.add(out=)`, the
  out= call, the allocating call, the loaded kernel function alone, and the two
  `torch.empty_like` an allocating call makes for its outputs (data, scale; `fast_path.allocate`),
  in a fresh process (as the benchmark's host rows are measured).

    python benchmarks/host_evidence.py [--runs 8] [--cache-dir DIR]    # every probe, on a GPU
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from diag import FIRST  # noqa: E402  (diag.py first-call's stages up to the first call's synchronize)

FIRST_CALL_TARGETS = ("first call in a fresh process", "first call from the pip-installed kernel wheel")
EAGER_TARGET = "an eager grouped call"
ALLOC_TARGET = "tiny tensor (128x256), allocating"
STARTUP_RUNS = 6  # fresh processes per source (each takes seconds on a GPU node: run.py's time budget)
EAGER_SHAPE = (16384, 7168)  # the grouped rows' shape (run.py's plan)


# ------------------------------------------------------------------------------------- pure parts

def first_call_summary(source: str, children: list[dict]) -> dict:
    """One source's row from `diag.py first-call` children: totals, CPU share, stage medians."""
    first = [sum(list(c["stages_ms"].values())[:FIRST]) for c in children]
    cpu = [c["first_cpu_ms"] / t for c, t in zip(children, first) if t > 0]
    names = list(children[0]["stages_ms"])[:FIRST]
    split = list(children[0].get("first_split_ms") or {})
    return {"probe": "first call", "source": source, "processes": len(children),
            "total_ms": [min(first), statistics.median(first), max(first)],
            "cpu_over_wall": statistics.median(cpu) if cpu else None,
            "stages_ms": {n: statistics.median(c["stages_ms"][n] for c in children) for n in names},
            "first_split_ms": {n: statistics.median(c["first_split_ms"][n] for c in children) for n in split}}


def worst_cell(targets: list[dict], prefix: str) -> str | None:
    """The worst cell's label of the missed target whose text starts with `prefix` (None: met or absent)."""
    for t in targets:
        if t["target"].startswith(prefix) and not t["met"] and t.get("worst"):
            return t["worst"]
    return None


def eager_case(label: str) -> tuple[str, int] | None:
    """(format, G) of a grouped cell label such as "nvfp4 G=64"."""
    m = re.fullmatch(r"(\w+) G=(\d+)", label.strip())
    return (m.group(1), int(m.group(2))) if m else None


def _ms(v: float) -> str:
    return f"{v:.2f}"


def markdown(rows: list[dict], device: str) -> list[str]:
    """The report's section: one table per probe that ran (none if no host target was missed)."""
    if not rows:
        return []
    lines = [f"### Why the missed host targets miss ({device})", ""]
    for r in rows:
        if r.get("error"):
            lines += [f"Not measured: the {r['probe']} probe failed ({r['error']}).", ""]
    rows = [r for r in rows if not r.get("error")]
    first = [r for r in rows if r["probe"] == "first call"]
    if first:
        stages = list(first[0]["stages_ms"])
        split = list(first[0]["first_split_ms"])
        lines += ["`benchmarks/diag.py first-call` (`quantize(x, \"mxfp8\")` first) in fresh processes, "
                  "alternated between the sources; stage medians in ms. CPU / wall near 1: the time is the "
                  "process's own CPU work.", "",
                  "| stage | " + " | ".join(f"{r['source']} ({r['processes']} processes)" for r in first) + " |",
                  "|---|" + "---:|" * len(first),
                  "| import + first call, min / median / max | "
                  + " | ".join(" / ".join(f"{v:.1f}" for v in r["total_ms"]) for r in first) + " |",
                  "| CPU time / wall time | " + " | ".join(f"{r['cpu_over_wall']:.2f}" if r["cpu_over_wall"]
                                                         else "-" for r in first) + " |"]
        lines += [f"| {n} | " + " | ".join(_ms(r["stages_ms"][n]) for r in first) + " |" for n in stages]
        lines += [f"| of the first call: {n} | " + " | ".join(_ms(r["first_split_ms"][n]) for r in first) + " |"
                  for n in split]
        lines.append("")
    eager = [r for r in rows if r["probe"] == "eager"]
    if eager:
        lines += ["`benchmarks/diag.py eager-split`, 16384x7168 bf16, out= given, us: the Python call's host time "
                  "(calls back to back), the loaded kernel function alone, one eager call and one graph replay "
                  "event-timed on an idle queue, back-to-back graph replays.", "",
                  "| call | host | direct kernel call | eager | one graph replay | back-to-back "
                  "| eager - back-to-back |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['case']} | {r['host_us']:.1f} | {r['direct_us']:.1f} | {r['eager_us']:.1f} | "
                  f"{r['graph1_us']:.1f} | {r['b2b_us']:.1f} | {r['eager_us'] - r['b2b_us']:.1f} |" for r in eager]
        lines.append("")
    alloc = [r for r in rows if r["probe"] == "alloc"]
    for r in alloc:
        us = r["us"]
        lines += ["Host time per call at 128x256 bf16 mxfp8 (best of interleaved rounds), us:", "",
                  "| call | us |", "|---|---:|"]
        lines += [f"| {name} | {v:.2f} |" for name, v in us.items()]
        lines += [f"| allocating minus out= | {us['quantize, allocating'] - us['quantize, out=']:.2f} |", ""]
    return lines


# ------------------------------------------------------------------------------------- GPU probes

def first_call_rows(runs: int, cache_dir: str | None) -> list[dict]:
    """`diag.py first-call` children from the default layers (and from `cache_dir`), summarized."""
    import diag

    env = {k: v for k, v in os.environ.items() if k != "KERNELFORGE_CACHE_DIR"}
    envs = {"default layers": env}
    if cache_dir:
        envs["cache directory"] = {**env, "KERNELFORGE_CACHE_DIR": cache_dir}
    children = diag.first_call_children("quantize", runs, envs)
    return [first_call_summary(source, rows) for source, rows in children.items()]


def _in_child(*args: str) -> list[dict]:
    """A probe run in a fresh process (`host_evidence.py --probe ...`): what the parent did before
    (large inputs, CUDA graphs, a profiler session) must not weigh on host times of a few us."""
    import subprocess

    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe", *args], capture_output=True,
                          text=True, cwd="/", env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"host_evidence.py --probe {' '.join(args)} failed (exit {proc.returncode}): "
                           f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def eager_rows(fmt: str, g: int) -> list[dict]:
    """eager-split of plain quantize in `fmt` and of the grouped call with `g` groups."""
    import diag
    from _timing import rotating_inputs

    xs = rotating_inputs(*EAGER_SHAPE)
    out = []
    for op, groups in (("quantize", 0), ("grouped", g)):
        row = diag.eager_split_row(op, fmt, groups, xs)
        row.pop("call")
        out.append({"probe": "eager", **row})
    del xs
    return out


def alloc_row() -> dict:
    """Host time per call of the tiny calls the allocating target compares, in this process."""
    import torch

    import kernelforge
    from _timing import host_us
    from kernelforge.ops import launch

    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    r, s = torch.randn_like(x), torch.empty_like(x)
    out = kernelforge.quantize(x, "mxfp8")
    kernelforge.quantize(x, "mxfp8", out=out)  # checked once, then remembered by the fast path
    q, sc = out
    coords = (("dtype", "bfloat16"), ("format", "mxfp8"), ("layout", "linear"), ("scale_mode", "floor"))
    fn = launch.kernel_for("quantize", coords, x.get_device(), 256, 32, x.data_ptr(), 512, 128)
    paths = {"torch.add(out=)": lambda: torch.add(x, r, out=s),
             "quantize, out=": lambda: kernelforge.quantize(x, "mxfp8", out=out),
             "quantize, allocating": lambda: kernelforge.quantize(x, "mxfp8"),
             "the loaded kernel function alone": lambda: fn(x, q, sc, None),
             # what the allocating fast path makes its outputs with (fast_path.allocate)
             "two torch.empty_like (the allocating call's outputs)":
                 lambda: (torch.empty_like(q), torch.empty_like(sc))}
    best: dict[str, float] = {}
    for _ in range(3):  # interleaved rounds, best of each: a noisy host affects all alike
        for name, f in paths.items():
            best[name] = min(best.get(name, float("inf")), host_us(f))
    return {"probe": "alloc", "us": best}


def evidence_rows(res: dict, startup_cache_dir: str | None = None, log=print,
                  deadline: float | None = None) -> list[dict]:
    """The probes of the host targets of `res["hopper_targets"]` that were missed; a probe that
    fails, or would start after `deadline` (a `time.perf_counter()` value: run.py's --budget-s),
    is a row naming why (the report says so), not the end of the run."""
    targets = res.get("hopper_targets") or []
    probes = []
    if any(worst_cell(targets, p) for p in FIRST_CALL_TARGETS):
        probes.append(("first call", f"diag.py first-call in {STARTUP_RUNS} fresh processes per source",
                       lambda: first_call_rows(STARTUP_RUNS, startup_cache_dir)))
    case = eager_case(worst_cell(targets, EAGER_TARGET) or "")
    if case:
        probes.append(("eager", f"eager-split of grouped {case[0]} G={case[1]} and plain quantize",
                       lambda: _in_child("eager", f"{case[0]} G={case[1]}")))
    if worst_cell(targets, ALLOC_TARGET):
        probes.append(("alloc", "host time of the tiny calls", lambda: _in_child("alloc")))
    rows: list[dict] = []
    for probe, what, fn in probes:
        if deadline is not None and time.perf_counter() > deadline:
            rows.append({"probe": probe, "error": "skipped: the run was past its time budget (--budget-s)"})
            log(f"host evidence: {probe} {rows[-1]['error']}")
            continue
        log(f"host evidence: {what}")
        try:
            rows += fn()
        except Exception as exc:  # noqa: BLE001 - one failed probe must not cost the report
            rows.append({"probe": probe, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"})
            log(f"host evidence: {probe} failed: {rows[-1]['error']}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=STARTUP_RUNS, help="fresh processes per source")
    ap.add_argument("--cache-dir", default=None, help="also the first call with KERNELFORGE_CACHE_DIR=DIR")
    ap.add_argument("--eager", default="nvfp4 G=64", help="the grouped cell of the eager probe")
    ap.add_argument("--probe", nargs="+", metavar="PROBE",
                    help="one probe in this process, its rows as JSON: eager 'FORMAT G=N' | alloc")
    args = ap.parse_args()
    if args.probe:
        rows = eager_rows(*eager_case(args.probe[1])) if args.probe[0] == "eager" else [alloc_row()]
        print(json.dumps(rows))
        return
    import torch

    rows = [*first_call_rows(args.runs, args.cache_dir), *_in_child("eager", args.eager), *_in_child("alloc")]
    print("\n".join(markdown(rows, torch.cuda.get_device_name())))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
