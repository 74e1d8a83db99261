"""The load path's cost: a fresh process's first call of a cached variant and the per-call host
cost, through the verified loader and through the previous loader's steps, in the same run.

The verified loader (kernelforge/runtime/loader.py) opens each file below the cache root with
O_NOFOLLOW, checks owner and mode, hashes the open descriptor, cross-checks the entry's
meta.json and loads /proc/self/fd/N, runtime library first. The previous loader read the file
by path, hashed the bytes and let tvm_ffi dlopen the path (its runtime library found through
RUNPATH). Each child process: torch imported and a CUDA tensor made, then `import kernelforge`,
the first call of one variant (mxfp8), the first call of a second variant (mxfp4), then the host
cost of an out= call, then the load of 16 more modules alone (median: the load path's own
cost, which the fresh-process figures bury in ~±20 ms of process-to-process noise). Modes
alternate over the runs; medians are printed.

    python benchmarks/bench_load.py [--runs 9] [--json out.json]     # on a GPU, cache as the runtime resolves it
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
mode, bench_dir = sys.argv[1], sys.argv[2]
x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
from kernelforge.runtime import layer_reader
if mode == "previous":
    import hashlib, tvm_ffi
    from pathlib import Path
    checked = set()
    def load_by_path(trusted, entry, runtime_entry):
        # The previous loader's steps: hash the bytes read by path (each file once per process),
        # dlopen the path.
        for e in (runtime_entry, entry):
            if e["main_path"] not in checked:
                assert hashlib.sha256(Path(e["main_path"]).read_bytes()).hexdigest() == e["sha256"]
                checked.add(e["main_path"])
        return tvm_ffi.load_module(entry["main_path"])[entry["extra"]["symbol"]]
    layer_reader.load_function = load_by_path
t1 = time.perf_counter()
out = kernelforge.quantize(x, "mxfp8")
torch.cuda.synchronize()
t2 = time.perf_counter()
kernelforge.quantize(x, "mxfp4")
torch.cuda.synchronize()
t3 = time.perf_counter()
sys.path.insert(0, bench_dir)
from _timing import host_us
kernelforge.quantize(x, "mxfp8", out=out)
per_call = min(host_us(lambda: kernelforge.quantize(x, "mxfp8", out=out)) for _ in range(3))
# The load path alone: 16 modules not loaded yet (runtime library already in), each timed.
from kernelforge.ops import launch
table = launch.dispatch_table()
groups = table.groups()
cands = [c for g in sorted(groups) if g.startswith("rmsnorm_quantize|") for c in groups[g]][:16]
loads = []
for c in cands:
    t = time.perf_counter()
    table.load(c)
    loads.append(1e6 * (time.perf_counter() - t))
loads.sort()
print(json.dumps({"import_ms": 1e3 * (t1 - t0), "first_ms": 1e3 * (t2 - t1), "second_ms": 1e3 * (t3 - t2),
                  "out_call_us": per_call, "module_load_us": loads[len(loads) // 2],
                  "device": torch.cuda.get_device_name()}))
"""
MODES = ("verified", "previous")


def run(runs: int) -> dict:
    bench_dir = str(Path(__file__).resolve().parent)
    samples: dict[str, list[dict]] = {m: [] for m in MODES}
    for i in range(runs):
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            proc = subprocess.run([sys.executable, "-c", CHILD, mode, bench_dir], capture_output=True, text=True,
                                  env=os.environ.copy(), cwd="/")
            if proc.returncode != 0:
                raise SystemExit(f"child ({mode}) failed:\n{proc.stderr}")
            samples[mode].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    device = samples[MODES[0]][0]["device"]
    keys = ("import_ms", "first_ms", "second_ms", "out_call_us", "module_load_us")
    summary = {m: {k: statistics.median(s[k] for s in samples[m]) for k in keys} for m in MODES}
    return {"device": device, "runs": runs, "median": summary, "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = run(args.runs)
    print(f"device: {res['device']}; median of {res['runs']} fresh processes per loader")
    print("| loader | import kernelforge (ms) | first call (ms) | second variant (ms) | one more module (us) "
          "| out= call (us) |")
    print("|---|---|---|---|---|---|")
    for mode, m in res["median"].items():
        print(f"| {mode} | {m['import_ms']:.1f} | {m['first_ms']:.2f} | {m['second_ms']:.2f} | "
              f"{m['module_load_us']:.0f} | {m['out_call_us']:.2f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
