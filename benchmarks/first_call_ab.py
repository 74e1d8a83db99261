"""The first call of two or more kernelforge installs side by side, from their kernel wheels and
from a cache directory: what a runtime change does to issue 33's startup targets (the first call
<= 25 ms; the wheel within 2 ms of a directory) on one host, before a full benchmark run.

    python benchmarks/first_call_ab.py --site old=SITE_A --site new=SITE_B --cache-dir DIR [--runs 12]

Each SITE is a `pip install --target` of kernelforge and the kernel wheels (device/wheel_node.sh);
each child is bench_startup.py's (`import kernelforge` + the first quantize call, torch imported
and a CUDA tensor made before the clock) with PYTHONPATH=SITE, from the default layers and with
KERNELFORGE_CACHE_DIR=DIR, the 2 x sites sources alternated `--runs` times so that the host's
drift weighs on all alike. Prints min / median / max per source and, per site, the difference
of the medians (the benchmark's definition, `bench_startup.layers_vs_cache_dir`); the last line
is JSON. `--stages`: `diag.py first-call` children instead, and the stage medians per source
(host_evidence.py's table): the layers and resolve stages, which the totals' spread between
processes hides.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_startup import OPS, alternated  # noqa: E402


def sources(sites: dict[str, str], cache_dir: str) -> dict[str, dict[str, str]]:
    """name -> environment: "<site> wheel" and "<site> directory" for every site."""
    base = {k: v for k, v in os.environ.items() if k not in ("KERNELFORGE_CACHE_DIR", "PYTHONPATH")}
    out = {}
    for name, site in sites.items():
        out[f"{name} wheel"] = {**base, "PYTHONPATH": site}
        out[f"{name} directory"] = {**base, "PYTHONPATH": site, "KERNELFORGE_CACHE_DIR": cache_dir}
    return out


def summary(samples: dict[str, list[float]], sites: list[str]) -> dict:
    """Per source min / median / max (ms); per site the median of the wheel minus that of the directory."""
    med = {s: statistics.median(v) for s, v in samples.items()}
    return {"sources": {s: {"min": min(v), "median": med[s], "max": max(v), "n": len(v)} for s, v in samples.items()},
            "wheel_minus_directory_ms": {site: med[f"{site} wheel"] - med[f"{site} directory"] for site in sites}}


def stages(envs: dict[str, dict[str, str]], runs: int) -> None:
    """`diag.py first-call` (quantize mxfp8 first) in `runs` fresh processes per source, alternated;
    host_evidence.py's table of the stage medians, then the rows as JSON."""
    import torch

    import diag
    import host_evidence

    children = diag.first_call_children("quantize", runs, envs)
    rows = [host_evidence.first_call_summary(source, c) for source, c in children.items()]
    print("\n".join(host_evidence.markdown(rows, torch.cuda.get_device_name())[2:]))
    print(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", action="append", required=True, metavar="NAME=DIR",
                    help="an install to measure (repeat)")
    ap.add_argument("--cache-dir", required=True, help="a cache directory holding the same builds")
    ap.add_argument("--runs", type=int, default=12, help="processes per source")
    ap.add_argument("--op", default=OPS[0], choices=OPS)
    ap.add_argument("--stages", action="store_true", help="stage medians from diag.py first-call children")
    args = ap.parse_args()
    sites = {}
    for item in args.site:
        name, sep, path = item.partition("=")
        if not sep or not name or not Path(path).is_dir():
            sys.exit(f"--site: expected NAME=DIR with DIR an existing directory, got {item!r}")
        sites[name] = path
    if not Path(args.cache_dir).is_dir():
        sys.exit(f"--cache-dir: expected an existing directory, got {args.cache_dir!r}")
    envs = sources(sites, args.cache_dir)
    if args.stages:
        stages(envs, args.runs)
        return
    children = alternated(args.op, args.runs, envs)
    samples = {name: [c["first_ms"] for c in rows] for name, rows in children.items()}
    device = next(iter(children.values()))[0]["device"]
    res = {"device": device, "op": args.op, "runs": args.runs, "sites": sites, **summary(samples, list(sites)),
           "samples": samples}
    print(f"{device}: import + first {args.op} call in fresh processes, {args.runs} per source, alternated (ms)")
    print("| source | min | median | max |\n|---|---:|---:|---:|")
    for name, s in res["sources"].items():
        print(f"| {name} | {s['min']:.1f} | {s['median']:.1f} | {s['max']:.1f} |")
    for site, d in res["wheel_minus_directory_ms"].items():
        print(f"{site}: wheel - directory = {d:+.2f} ms (difference of the medians; target <= 2)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
