"""Where `import kernelforge`'s torch.library registration time goes, in fresh processes.

    PYTHONPATH=. python benchmarks/diag_registration.py [--runs 8]

Each child sets up like `bench_startup.py` (torch imported, CUDA tensors made), wraps the
torch.library entry points the op modules call (custom_op, Library.define / impl /
_register_fake, infer_schema, the fake registry) with timers that count only the outermost
call, imports kernelforge.ops, and prints the milliseconds per entry point and the import's
total. The medians over the children are printed last.
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
import functools, importlib
spent = {}
depth = [0]

def timed(name, fn):
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

import torch.library as tl
from torch._library import simple_registry
tl.custom_op = timed("custom_op", tl.custom_op)
tl.infer_schema = timed("infer_schema", tl.infer_schema)
for meth in ("define", "impl", "_register_fake"):
    if hasattr(tl.Library, meth):
        setattr(tl.Library, meth, timed("Library." + meth, getattr(tl.Library, meth)))
holder = type(simple_registry.singleton.find("kf_diag::none").fake_impl)
holder.register = timed("fake registry", holder.register)
t0 = time.perf_counter()
import kernelforge.ops
spent["import kernelforge.ops (total)"] = (time.perf_counter() - t0) * 1e3
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
