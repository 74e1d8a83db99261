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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _children import TIMERS, cli  # noqa: E402
from bench_startup import SETUP  # noqa: E402

CHILD = SETUP + TIMERS + r"""
import kernelforge, kernelforge.ops
import kernelforge.runtime.loader as loader
import kernelforge.runtime.dispatch as dispatch

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


if __name__ == "__main__":
    cli(CHILD, __doc__)
