"""SASS instruction counts of cached kernels (needs `cuobjdump` and the `nvdisasm` it runs: the GPU
runner, or `pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` here, which puts both under
site-packages/nvidia/cu13/bin; put that on PATH).

The kernels are fully unrolled, so instructions per element = SASS instructions of the kernel
divided by the elements one thread handles; that is the ALU side of the bandwidth budget. Static
counts: every branch is counted, taken or not. Registers per thread and the stack frame come from
`cuobjdump -res-usage`: registers set how many CTAs fit on an SM, and a stack frame is local memory
(spills or arrays ptxas could not keep in registers) that each thread reads back through L1.
Usage: PYTHONPATH=. python benchmarks/sass_stats.py [NAME_GLOB ...]
"""
from __future__ import annotations

import fnmatch
import json
import re
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from kernelforge.config import resolve_cache_root
from kernelforge.formats import FORMATS
from kernelforge.sources import source_hash

INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)")
DEFAULT = ["quantize.*.swizzled.bfloat16.aligned.sm_90a.*",
           "rmsnorm_quantize.*.swizzled.bfloat16.none.h2k.sm_90a.*",
           "rmsnorm_quantize.*.swizzled.bfloat16.none.h8k.sm_90a.*",
           "rmsnorm_quantize.*.swizzled.bfloat16.none.h32k.sm_90a.*"]


def elements_per_thread(entry: dict) -> int | None:
    """Elements one thread handles, where the kernel is unrolled over them (None: a kernel that
    loops over rows, e.g. grouped quantize; its static count is per kernel only)."""
    v = entry["variant"]
    fmt = FORMATS[v["axes"]["format"]]
    if entry["op"] == "quantize":
        return fmt.block * int(v["axes"]["units_per_thread"])
    if entry["op"] == "quantize_columnwise":
        from kernelforge.families.quantize_columnwise import kernel as qt  # imports cutlass: the build host has it

        return qt.TILE_M * qt.TILE_BLOCKS * fmt.block // qt.THREADS  # one tile per CTA
    if "elements" not in v["axes"]:
        return None
    return int(v["axes"]["elements"])


def resources(cubin: Path) -> tuple[int, int]:
    """Registers per thread and stack-frame bytes of the cubin's kernel (cuobjdump -res-usage;
    (-1, 0) if it prints none)."""
    out = subprocess.run(["cuobjdump", "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else (-1, 0)


def embedded_cubins(so: Path, out_dir: Path) -> list[Path]:
    """CuTe-DSL modules embed their cubin as a data blob: cut out every CUDA ELF (e_machine 190)."""
    data = so.read_bytes()
    found, pos = [], data.find(b"\x7fELF", 1)
    while pos > 0:
        if struct.unpack_from("<H", data, pos + 18)[0] == 190:
            phoff, shoff = struct.unpack_from("<QQ", data, pos + 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, pos + 0x36)
            # nvcc/ptxas place the program headers after the section headers: keep both tables.
            end = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
            path = out_dir / f"{so.parent.name}-{len(found)}.cubin"
            path.write_bytes(data[pos: pos + end])
            found.append(path)
        pos = data.find(b"\x7fELF", pos + 1)
    return found


def main() -> None:
    pats = sys.argv[1:] or DEFAULT
    root, _ = resolve_cache_root(None)
    index = json.loads((root / "v1" / "index.json").read_text())["entries"]
    rows = []
    for e in index.values():
        if e.get("kind") != "kernel" or not any(fnmatch.fnmatch(e["name"], p) for p in pats):
            continue
        if e.get("source_hash") != source_hash(e["op"]):
            continue  # built from other kernel sources than this checkout's
        so = root / "v1" / "artifacts" / e["key"][:2] / e["key"] / e["main_file"]
        cubins = embedded_cubins(so, Path(tempfile.mkdtemp()))
        sass = "".join(subprocess.run(["cuobjdump", "-sass", str(c)], capture_output=True, text=True).stdout
                       for c in cubins)
        ops = Counter(m.group(2).split(".")[0] for m in INSTR.finditer(sass))
        n = sum(ops.values()) - ops.get("NOP", 0)
        ept = elements_per_thread(e)
        regs, stack = max((resources(c) for c in cubins), default=(-1, 0))
        rows.append((e["name"], n, ept, regs, stack, ops.most_common(8)))
    for name, n, ept, regs, stack, top in sorted(rows):
        per = f"/ {ept:3d} elements = {n / ept:5.1f} per element" if ept else "(loops over rows)"
        frame = f", {stack}-byte stack frame" if stack else ""
        print(f"{name:70} {n:5d} SASS instr {per}, {regs} registers{frame}; top {top}")


if __name__ == "__main__":
    main()
