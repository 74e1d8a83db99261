"""Where the CPU time of `import kernelforge` + the first call goes: cProfile in a fresh process.

    PYTHONPATH=. python benchmarks/diag_first_call_profile.py [--op quantize_mxfp8] [--top 40]

The child sets up like `bench_startup.py` (torch imported, CUDA tensors made), then profiles
`import kernelforge` + the first call of `--op` with its synchronize, and prints the functions
by own time and by cumulative time (cProfile's overhead inflates Python-heavy parts; compare
rows with each other, not with the unprofiled milliseconds).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_startup import OPS, SETUP  # noqa: E402

PROFILE = SETUP + r"""
import cProfile, io, pstats
op, top = sys.argv[1], int(sys.argv[2])
prof = cProfile.Profile()
prof.enable()
import kernelforge
CALLS[op](kernelforge)
torch.cuda.synchronize()
prof.disable()
for key in ("tottime", "cumulative"):
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
    print(f"== by {key}")
    print("\n".join(line for line in s.getvalue().splitlines() if line.strip()))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="quantize_mxfp8", choices=OPS)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    proc = subprocess.run([sys.executable, "-c", PROFILE, args.op, str(args.top)], capture_output=True, text=True,
                          env=os.environ.copy(), cwd="/")
    if proc.returncode != 0:
        sys.exit(f"the profiled child failed:\n{proc.stderr[-3000:]}")
    print(proc.stdout)


if __name__ == "__main__":
    main()
