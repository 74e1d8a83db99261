"""Why a kernel target is missed, measured: the worst cell of each missed kernel target of issue 33
profiled once with Nsight Compute (`ncu`): its GPU time, DRAM throughput, achieved and theoretical
occupancy, registers per thread, instructions executed per element, how busy the issue slots and
the ALU and FMA pipes are, and the three largest warp stall reasons (warps stalled per issued
instruction), so the report shows whether a kernel is bound by memory, by instructions or by
latency.

The cells are launched by `profile_kernels.py` (one launch per case inside an NVTX range) under an
`ncu` process each; `run.py` calls `evidence_rows` after its targets (`--no-evidence` skips it).
Each cell also runs back to back for two seconds beside a same-size copy (`_clocks.sustained`):
the SM clock and board power it holds, and how often the board's power cap held the clock down,
which a single profiled launch does not show.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

STALLS = ("long_scoreboard", "lg_throttle", "math_pipe_throttle", "wait", "not_selected", "selected",
          "short_scoreboard", "mio_throttle", "barrier", "dispatch_stall", "drain", "no_instruction",
          "imc_miss", "membar", "branch_resolving", "tex_throttle", "sleeping", "misc")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = {
    "gpu__time_duration.sum": "time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers",
    "smsp__thread_inst_executed.sum": "thread_instructions",
    # How close the kernel is to issuing an instruction every cycle (one per cycle per scheduler),
    # and how busy the two pipes the conversions use are: near 100% issue-bound, whatever the
    # stalls say. https://docs.nvidia.com/nsight-compute/ProfilingGuide/#metrics-decoder
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_pct",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active": "pipe_alu_pct",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active": "pipe_fma_pct",
    **{STALL_METRIC.format(s): f"stall_{s}" for s in STALLS},
}


def _worst(rows: list[dict], value, below: float) -> dict | None:
    """The row with the smallest `value` if it is below `below` (a missed >= target), else None."""
    rows = [r for r in rows if value(r) is not None]
    if not rows:
        return None
    row = min(rows, key=value)
    return row if value(row) < below else None


def cases(res: dict, pct: float, min_m: int) -> list[tuple[str, str, int]]:
    """(target, profile_kernels.py case, elements) of the worst cell of each missed kernel target."""
    big = lambda rows: [r for r in rows or [] if r.get("M", 0) >= min_m]  # noqa: E731
    out = []
    r = _worst(big(res.get("quantize")), lambda r: r["pct_copy"], pct)
    if r:
        out.append(("quantize", f"row:{r['format']}:{r['M']}:{r['K']}@{r['layout']}", r["M"] * r["K"]))
    r = _worst(big(res.get("dual")), lambda r: r["pct_copy"], pct)
    if r:
        out.append(("dual", f"dual:{r['format']}:{r['M']}:{r['K']}@{r['layout']}", r["M"] * r["K"]))
    r = _worst(big(res.get("dual")), lambda r: r.get("columnwise_pct_copy"), pct)
    if r:
        out.append(("columnwise", f"col:{r['format']}:{r['M']}:{r['K']}@{r['layout']}", r["M"] * r["K"]))
    r = _worst([x for x in big(res.get("rht")) if x.get("outputs") == "both"], lambda r: r["pct_copy"], pct)
    if r:
        out.append(("rht", f"rht:nvfp4:{r['M']}:{r['K']}@{r['layout']}", r["M"] * r["K"]))
    for op, kind in (("rmsnorm", "rmsnorm"), ("add_rmsnorm", "addrms")):
        r = _worst([x for x in big(res.get("fused")) if x["op"] == op], lambda r: r.get("pct_copy"), pct)
        if r:
            out.append((op, f"{kind}:{r['format']}:{r['M']}:{r['H']}@{r.get('layout') or 'swizzled'}",
                        r["M"] * r["H"]))
    off = [r for r in res.get("grouped") or [] if r.get("kind") == "offsets"]
    r = _worst([x for x in off if x["G"] <= 64], lambda r: r["pct_copy"], pct)
    if r:
        out.append(("grouped G<=64", f"grouped:{r['format']}:{r['T']}:{r['K']}:{r['G']}", r["T"] * r["K"]))
    big_g = [x for x in off if x["G"] == 1024]
    if big_g:
        r = min(big_g, key=lambda r: r["pct_copy"])
        out.append(("grouped G=1024", f"grouped:{r['format']}:{r['T']}:{r['K']}:{r['G']}", r["T"] * r["K"]))
    return out


def ncu_path() -> str | None:
    return shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu")
                                        if os.access(p, os.X_OK)), None)


# ncu reports times and byte counts in the unit it picks: factors to microseconds and to bytes.
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
              "s": 1e6, "second": 1e6}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}


def profile(spec: str, ncu: str, timeout: float = 120.0, metrics: dict[str, str] = METRICS) -> list[dict[str, float]]:
    """The values of `metrics` (ncu metric name -> short name; default METRICS) of every kernel one
    case launches, by short name, in launch order (one `ncu` process per case: a case may launch
    more than one kernel). Times are in microseconds, byte counts in bytes."""
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "kf/", "--csv",
           "--metrics", ",".join(metrics), sys.executable, str(HERE / "profile_kernels.py"), spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    rows = [r for r in csv.reader(io.StringIO(proc.stdout)) if len(r) > 10]
    if not rows:
        raise RuntimeError(f"ncu produced no metrics (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-600:]}")
    head = rows[0]
    iid, imetric, ivalue, iunit = (head.index(k) for k in ("ID", "Metric Name", "Metric Value", "Metric Unit"))
    by_id: dict[str, dict[str, float]] = {}
    for r in rows[1:]:
        name = metrics.get(r[imetric])
        if name is None:
            continue
        value = float(r[ivalue].replace(",", "") or "nan")
        if name == "time":
            value *= TIME_UNITS[r[iunit]]
        elif r[iunit] in BYTE_UNITS:
            value *= BYTE_UNITS[r[iunit]]
        by_id.setdefault(r[iid], {})[name] = value
    return [by_id[k] for k in sorted(by_id, key=int)]


def top_stalls(kernel: dict[str, float], n: int) -> list[tuple[str, float]]:
    """The kernel's n largest stall reasons (name, warps per issued instruction), largest first."""
    return sorted(((k[len("stall_"):], v) for k, v in kernel.items() if k.startswith("stall_")),
                  key=lambda kv: -kv[1])[:n]


def evidence_rows(res: dict, pct: float, min_m: int) -> list[dict]:
    """The evidence table's rows (empty when every kernel target is met); a row with `error`
    where ncu is missing or fails. A case that launches several kernels reports their summed
    time and instructions, and the longest kernel's occupancy, registers, DRAM share and stalls."""
    todo = cases(res, pct, min_m)
    ncu = ncu_path()
    out = []
    for target, case, elements in todo:
        if ncu is None:
            out.append({"target": target, "case": case, "error": "ncu not found"})
            continue
        try:
            kernels = profile(case, ncu)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            out.append({"target": target, "case": case, "error": str(exc)[:300]})
            continue
        clocks = sustained_clocks(case)
        main = max(kernels, key=lambda m: m.get("time") or 0.0)
        stalls = top_stalls(main, 3)
        instructions = sum(m.get("thread_instructions") or 0.0 for m in kernels)
        out.append({"target": target, "case": case, "kernels": len(kernels),
                    "us": sum(m.get("time") or 0.0 for m in kernels), "dram_pct": main.get("dram_pct"),
                    "achieved_occupancy_pct": main.get("achieved_occupancy_pct"),
                    "theoretical_occupancy_pct": main.get("theoretical_occupancy_pct"),
                    "registers": main.get("registers"),
                    "instructions_per_element": instructions / elements if instructions else None,
                    "issue_pct": main.get("issue_pct"), "pipe_alu_pct": main.get("pipe_alu_pct"),
                    "pipe_fma_pct": main.get("pipe_fma_pct"),
                    "top_stalls": stalls, "clocks": clocks})
    if any("top_stalls" in r for r in out):
        ref = "copy:16384:8192"
        out.append({"target": "copy (reference)", "case": ref, "clocks": sustained_clocks(ref)})
    return out


def sustained_clocks(case: str, seconds: float = 2.0) -> dict:
    """`_clocks.sustained` of a profile_kernels.py case (or `copy:M:K`, a bf16 device-to-device
    copy) in this process; {"error": ...} where the GPU or nvidia-smi cannot be asked."""
    import torch

    if not torch.cuda.is_available():
        return {"error": "no CUDA GPU"}
    try:
        from _clocks import call_of, sustained

        return sustained(call_of(case), seconds, torch.cuda.current_device())
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)[:200]}


def markdown(rows: list[dict], device: str) -> list[str]:
    """The report's evidence section (nothing when no kernel target is missed)."""
    if not rows:
        return []
    lines = ["", f"### Why the missed kernel targets miss ({device}, Nsight Compute, worst cell of each)", "",
             "| target | case | kernels | us | DRAM % of peak | achieved / theoretical occupancy % | registers "
             "| thread instructions per element | issue slots busy % | ALU / FMA pipe % "
             "| top stalls (warps per issued instruction) "
             "| back to back: SM MHz (lowest) / board W / power-capped % of samples |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]

    def f(v, fmt="{:.1f}"):
        return "" if v is None else fmt.format(v)

    def held(c: dict | None) -> str:
        if not c or c.get("error") or "sm_mhz" not in c:
            return (c or {}).get("error", "")
        return (f"{c['sm_mhz']:.0f} ({c['sm_mhz_min']:.0f}) / {c['power_w']:.0f} / "
                f"{c['power_capped_pct']:.0f}")

    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['target']} | `{r['case']}` | | | | | | | | | not profiled: {r['error']} | |")
            continue
        if "top_stalls" not in r:  # the copy's reference row: clocks only
            lines.append(f"| {r['target']} | `{r['case']}` | | | | | | | | | | {held(r.get('clocks'))} |")
            continue

        stalls = ", ".join(f"{name} {v:.2f}" for name, v in r["top_stalls"])
        lines.append(f"| {r['target']} | `{r['case']}` | {r.get('kernels', 1)} | {f(r['us'])} | {f(r['dram_pct'])} | "
                     f"{f(r['achieved_occupancy_pct'])} / {f(r['theoretical_occupancy_pct'])} | "
                     f"{f(r['registers'], '{:.0f}')} | "
                     f"{f(r['instructions_per_element'], '{:.2f}')} | {f(r.get('issue_pct'))} | "
                     f"{f(r.get('pipe_alu_pct'))} / {f(r.get('pipe_fma_pct'))} | {stalls} | {held(r.get('clocks'))} |")
    return lines


# The counters `python benchmarks/evidence.py CASE ...` prints besides METRICS (device/ncu_release.sh).
COUNTERS = {**METRICS, "dram__bytes_read.sum": "dram_read", "dram__bytes_write.sum": "dram_write",
            "launch__grid_size": "grid", "smsp__inst_executed.sum": "warp_instructions"}


def main() -> None:
    """Each case's kernels under Nsight Compute, a line each: time, DRAM bytes, occupancy,
    registers, grid, warp instructions, issue slots and pipes busy, and the four largest stalls."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+", help="profile_kernels.py cases, e.g. grouped:nvfp4:16384:7168:1024")
    ap.add_argument("--label", default="", help="a word put before each line (the release's name)")
    args = ap.parse_args()
    ncu = ncu_path()
    if ncu is None:
        sys.exit("ncu: not found on PATH or in the usual CUDA folders")
    for case in args.cases:
        for k in profile(case, ncu, metrics=COUNTERS):
            print(f"{args.label} {case} | {k['time']:.1f} us | DRAM read {k['dram_read'] / 1e6:.1f} MB "
                  f"write {k['dram_write'] / 1e6:.1f} MB | occupancy {k['achieved_occupancy_pct']:.1f} / "
                  f"{k['theoretical_occupancy_pct']:.1f} | regs {k['registers']:.0f} grid {k['grid']:.0f} | "
                  f"warp inst {k['warp_instructions'] / 1e6:.2f} M | issue {k['issue_pct']:.1f}% "
                  f"ALU {k['pipe_alu_pct']:.1f}% FMA {k['pipe_fma_pct']:.1f}% | "
                  + ", ".join(f"{name} {v:.2f}" for name, v in top_stalls(k, 4)))


if __name__ == "__main__":
    main()
