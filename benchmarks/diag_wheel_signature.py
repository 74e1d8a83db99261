"""What checking a kernel wheel's signature costs a fresh process: import + first op, signed wheel
(the release key trusted) against the same wheel unsigned (allowed by KERNELFORGE_ALLOW_UNSIGNED)
and against its cache directory named as an explicit root (no wheel layers at all), in interleaved
fresh processes, plus the layer discovery and check again in the same process.

Run on a node where the kernel wheel is installed (see device/node_check.sh): the unsigned copy is
made by removing SIGNATURE.json from a copy of the site directory named by --site.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import json, time
import torch
x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
import kernelforge
kernelforge.quantize(x, "mxfp8")
torch.cuda.synchronize()
t1 = time.perf_counter()
from kernelforge.cache import wheel_signature
from kernelforge.cache.layers import wheel_layers
t2 = time.perf_counter()
[wheel_signature.signature_status(l.root.parent, "kernelforge-kernels-sm90a") for l in wheel_layers()[:1]]
t3 = time.perf_counter()
print(json.dumps({"first_op_ms": (t1 - t0) * 1e3, "layers_and_check_again_ms": (t3 - t2) * 1e3}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", required=True, help="the site dir the kernel wheel is installed in")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    site = Path(args.site)
    unsigned = Path(tempfile.mkdtemp(prefix="kf-unsigned-")) / "site"
    shutil.copytree(site, unsigned, symlinks=True)
    for sig in unsigned.glob("kernelforge_kernels_*/SIGNATURE.json"):
        sig.unlink()
    wheel_cache = next(site.glob("kernelforge_kernels_*/cache"))
    setups = {
        "signed": {**os.environ, "PYTHONPATH": str(site)},
        "unsigned": {**os.environ, "PYTHONPATH": str(unsigned), "KERNELFORGE_ALLOW_UNSIGNED": "*"},
        # the same files as an explicit cache root: no entry-point scan, no wheel layer, no signature
        "explicit": {**os.environ, "PYTHONPATH": str(site), "KERNELFORGE_CACHE_DIR": str(wheel_cache)},
    }
    results: dict[str, list[dict[str, float]]] = {k: [] for k in setups}
    for _ in range(args.runs):
        for name, env in setups.items():
            proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, cwd="/")
            if proc.returncode != 0:
                sys.exit(f"{name} child failed:\n{proc.stderr[-3000:]}")
            results[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for name, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{name:9} median of {len(rows)}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
