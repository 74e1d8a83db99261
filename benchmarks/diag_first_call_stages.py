"""Where the first call's milliseconds go inside the runtime, in fresh processes (GPU machine).

    PYTHONPATH=. python benchmarks/diag_first_call_stages.py [--runs 8]

Each child sets up like `bench_startup.py` (torch imported, CUDA tensors made), imports
kernelforge.ops (not timed), wraps the runtime's steps with timers (inclusive: a step's time
contains the steps it calls; each counts its outermost calls only), then times the first
`quantize(x, "mxfp8")` and its synchronize. Printed per child, then the medians:

* `first call`: the whole call until it returns (the launch queued), `synchronize` after it;
* `DispatchTable.resolve`: the candidates, the tuning table and the loads;
* `DispatchTable.tuning_tables`: reading, verifying and parsing the tuning table;
* `load_function`: the runtime library and the module, verified and loaded;
* `_load_runtime`: the runtime library (with libtvm_ffi.so);
* `tvm_ffi_library`: dlopen of libtvm_ffi.so alone;
* `open_verified`: opening and hashing files against the index (all of them);
* the rest of the first call (argument checks, output allocation, the launch) is `first call`
  minus `DispatchTable.resolve`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_startup import SETUP  # noqa: E402

CHILD = SETUP + r"""
import functools
import kernelforge, kernelforge.ops
import kernelforge.runtime.loader as loader
import kernelforge.runtime.dispatch as dispatch
spent = {}

def timed(name, fn):
    depth = [0]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[name] = spent.get(name, 0.0) + (time.perf_counter() - t) * 1e3
    return wrapper

for name in ("tvm_ffi_library", "_load_runtime", "load_function", "open_verified"):
    setattr(loader, name, timed(name, getattr(loader, name)))
dispatch.load_function = loader.load_function  # the name dispatch imported
for name in ("resolve", "tuning_tables"):
    setattr(dispatch.DispatchTable, name, timed("DispatchTable." + name, getattr(dispatch.DispatchTable, name)))
t0 = time.perf_counter()
kernelforge.quantize(x, "mxfp8")
t1 = time.perf_counter()
torch.cuda.synchronize()
t2 = time.perf_counter()
spent["first call"] = (t1 - t0) * 1e3
spent["synchronize"] = (t2 - t1) * 1e3
print(json.dumps(spent))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                              env=os.environ.copy(), cwd="/")
        if proc.returncode != 0:
            sys.exit(f"the child failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps({k: round(v, 3) for k, v in runs[-1].items()}))
    print("medians (ms):")
    for key in sorted({k for r in runs for k in r}):
        print(f"  {key:32} {statistics.median(r.get(key, 0.0) for r in runs):7.3f}")


if __name__ == "__main__":
    main()
