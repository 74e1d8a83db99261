"""Every op on one GPU, one table: `PYTHONPATH=. python benchmarks/run.py` (a checkout, cache built).

For each op, variant and shape: GPU time (median of CUDA-graph replays of back-to-back calls on
inputs rotated beyond L2), GB/s, % of the copy bandwidth measured at the start of this same run,
and the speedup over the pure-torch reference of NUMERICS.md run eagerly and under
torch.compile. Then the cold start of a fresh process and the host cost per call, and a check
of the performance targets of issue 5. Writes every number as JSON (--json) and appends a dated
markdown section with the device name to benchmarks/RESULTS.md (--no-append to skip).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
from pathlib import Path

import torch

import bench_fused
import bench_quantize
from _timing import copy_bandwidth

HERE = Path(__file__).resolve().parent

# (what, predicate over the collected rows -> (value, passed)) -- the targets of issue 5.
FUSED_MIN_PCT = 85.0
HOST_OUT_US = 1.5
COLD_MS = 5.0


def _pct(rows, **match) -> list[float]:
    return [r["pct_copy"] for r in rows if all(r.get(k) == v for k, v in match.items())]


def targets(res: dict) -> list[dict]:
    """Each issue-5 target with the measured value and whether it holds."""
    q, f = res["quantize"], res["fused"]
    out = []

    def add(name: str, value: float, ok: bool, unit: str) -> None:
        out.append({"target": name, "value": round(value, 2), "unit": unit, "met": bool(ok)})

    v = min(_pct(q, M=16384, K=8192))
    add("quantize 16384x8192, every format and layout: >= 96% of copy BW (min)", v, v >= 96, "%")
    v = min(_pct(q, M=8192, K=7168))
    add("quantize 8192x7168: >= 90% of copy BW (min)", v, v >= 90, "%")
    v = max(r["us"] for r in q if r["M"] == 1024 and r["K"] == 4096)
    add("quantize 1024x4096: <= 7 us GPU time (max)", v, v <= 7, "us")
    big = [r["pct_copy"] for r in f if r["M"] >= 16384]
    v = min(big)
    add(f"fused ops, M >= 16384: >= {FUSED_MIN_PCT:.0f}% of copy BW (min)", v, v >= FUSED_MIN_PCT, "%")
    add(f"fused ops, M >= 16384: cells below {FUSED_MIN_PCT:.0f}%", sum(p < FUSED_MIN_PCT for p in big),
        not any(p < FUSED_MIN_PCT for p in big), f"of {len(big)}")
    v = max(res["host"]["quantize"]["overhead_out_us"], res["host"]["fused"]["overhead_out_us"])
    add(f"host cost with out= over the direct call: <= {HOST_OUT_US} us (max of quantize, rmsnorm_quantize)",
        v, v <= HOST_OUT_US, "us")
    v = max(c["first_call_ms"] for c in res["cold"])
    add(f"fresh-process first call of a cached variant: <= {COLD_MS:.0f} ms (max)", v, v <= COLD_MS, "ms")
    return out


def unified_rows(res: dict) -> list[dict]:
    rows = []
    for r in res["quantize"]:
        rows.append({"op": "quantize", "variant": f"{r['format']}/{r['mode']}/{r['layout']}",
                     "shape": f"{r['M']}x{r['K']}", **{k: r.get(k) for k in
                     ("us", "GBps", "pct_copy", "speedup_vs_compiled_ref", "speedup_vs_eager_ref")}})
    for r in res["fused"]:
        rows.append({"op": r["op"] + "_quantize", "variant": f"{r['format']}/{r['mode']}/{r['layout']}",
                     "shape": f"{r['M']}x{r['H']}", **{k: r.get(k) for k in
                     ("us", "GBps", "pct_copy", "speedup_vs_compiled_ref", "speedup_vs_eager_ref")}})
    return rows


def markdown(res: dict) -> str:
    f = lambda v, p=1: "–" if v is None else f"{v:.{p}f}"  # noqa: E731
    day = datetime.date.today().isoformat()
    lines = [f"## {day} — `python benchmarks/run.py`, {res['device']} (torch {torch.__version__})", "",
             f"Copy bandwidth measured in this run: **{res['copy_GBps']:.0f} GB/s** (bytes read + written). "
             "GPU time = median of CUDA-graph replays of back-to-back calls, inputs rotated beyond L2, bf16 "
             "input; speedups are over the pure-torch reference (NUMERICS.md) run eagerly and under "
             "torch.compile.", "",
             "| op | variant | M x K | us | GB/s | % of copy | x compiled ref | x eager ref |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in unified_rows(res):
        lines.append(f"| {r['op']} | {r['variant']} | {r['shape']} | {f(r['us'])} | {f(r['GBps'], 0)} | "
                     f"{f(r['pct_copy'])} | {f(r['speedup_vs_compiled_ref'])} | {f(r['speedup_vs_eager_ref'])} |")
    lines += ["", "| cold start | import (ms) | first call, fresh process (ms) | second call (ms) |",
              "|---|---:|---:|---:|"]
    for c in res["cold"]:
        lines.append(f"| quantize {c['format']} | {c['import_ms']:.0f} | {c['first_call_ms']:.2f} | "
                     f"{c['second_call_ms']:.3f} |")
    hq, hf = res["host"]["quantize"], res["host"]["fused"]
    lines += ["", "| host cost per call (us) | direct TVM-FFI call | with out= | allocating |", "|---|---:|---:|---:|",
              f"| quantize 128x256 mxfp8 | {hq['direct_us']:.2f} "
              f"| {hq['quantize_out_us']:.2f} (+{hq['overhead_out_us']:.2f}) "
              f"| {hq['quantize_alloc_us']:.2f} |",
              f"| rmsnorm_quantize 128x1024 mxfp8 | {hf['direct_us']:.2f} | {hf['python_out_us']:.2f} "
              f"(+{hf['overhead_out_us']:.2f}) | {hf['python_alloc_us']:.2f} |",
              "", "| target (issue 5) | measured | met |", "|---|---:|---|"]
    for t in res["targets"]:
        lines.append(f"| {t['target']} | {t['value']} {t['unit']} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(HERE / "out" / "run.json"))
    ap.add_argument("--results", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--no-append", action="store_true", help="do not append to RESULTS.md")
    ap.add_argument("--no-refs", action="store_true", help="skip the eager and compiled references")
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    copy_gbs = copy_bandwidth()
    print(f"device: {name}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    res = {"device": name, "copy_GBps": copy_gbs, "torch": torch.__version__}
    # Host costs and cold starts first, while this process is still light (no torch.compile yet).
    res["cold"] = bench_quantize.cold_start()
    hf = bench_fused.host_overhead()
    res["host"] = {"quantize": bench_quantize.host_overhead(),
                   "fused": {**hf, "overhead_out_us": hf["python_out_us"] - hf["direct_us"]}}
    res["quantize"] = bench_quantize.kernel_rows(copy_gbs, not args.no_refs)
    res["fused"] = bench_fused.rows(copy_gbs, not args.no_refs, bench_fused.M_VALUES, bench_fused.H_VALUES)
    res["targets"] = targets(res)
    fused_sp = [r["speedup_vs_unfused"] for r in res["fused"] if r.get("speedup_vs_unfused")]
    res["fused_geomean_vs_unfused"] = math.exp(sum(map(math.log, fused_sp)) / len(fused_sp)) if fused_sp else None
    md = markdown(res)
    print(md)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(res, indent=1))
    if not args.no_append:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n" + md)


if __name__ == "__main__":
    main()
