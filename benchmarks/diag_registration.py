"""Where `import kernelforge`'s torch.library registration time goes, in fresh processes.

    PYTHONPATH=. python benchmarks/diag_registration.py [--runs 8]

Each child sets up like `bench_startup.py` (torch imported, CUDA tensors made), wraps the
torch.library entry points the op modules call (custom_op, Library.define / impl /
_register_fake, infer_schema, the fake registry) with timers that count only the outermost
call, imports kernelforge.ops, and prints the milliseconds per entry point and the import's
total. The medians over the children are printed last.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _children import TIMERS, cli  # noqa: E402
from bench_startup import SETUP  # noqa: E402

CHILD = SETUP + TIMERS + r"""
outer = [0]  # custom_op calls Library.define/impl itself: count the outermost call only
import torch.library as tl
from torch._library import simple_registry
tl.custom_op = timed("custom_op", tl.custom_op, outer)
tl.infer_schema = timed("infer_schema", tl.infer_schema, outer)
for meth in ("define", "impl", "_register_fake"):
    if hasattr(tl.Library, meth):
        setattr(tl.Library, meth, timed("Library." + meth, getattr(tl.Library, meth), outer))
holder = type(simple_registry.singleton.find("kf_diag::none").fake_impl)
holder.register = timed("fake registry", holder.register, outer)
t0 = time.perf_counter()
import kernelforge.ops
spent["import kernelforge.ops (total)"] = (time.perf_counter() - t0) * 1e3
print(json.dumps(spent))
"""


if __name__ == "__main__":
    cli(CHILD, __doc__)
