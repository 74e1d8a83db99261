"""The link recipe: one small shared runtime library per toolchain, tiny per-variant modules.

The runtime library statically links the CuTe dialect runtime, the shim above and cudart 12.9,
so loading a module needs neither the DSL nor libcute_dsl_runtime.so. Modules find it through
a RUNPATH relative to their own location ($ORIGIN), so a cache directory can be moved.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..cache.layout import runtime_lib_name
from ..errors import BuildError
from .toolchain import site_paths

SHIM_SOURCE = Path(__file__).with_name("cute_rt_shim.c")
# Linker behaviour that distros set differently through their compiler specs or binutils
# defaults, pinned so that the same inputs give the same bytes on any builder: no build-id
# (a hash that also covers the linker version string), GNU hash only (a "both" default adds a
# .hash section), RUNPATH rather than RPATH (upstream binutils' default; Debian's is RUNPATH).
DETERMINISTIC_LDFLAGS = ["-Wl,--build-id=none", "-Wl,--hash-style=gnu", "-Wl,--enable-new-dtags"]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"link failed: {' '.join(cmd)}\n{proc.stderr.strip()}")


def link_runtime(out_dir: Path, runtime_key: str) -> Path:
    """Build the shared runtime library into out_dir; return its path."""
    paths = site_paths()
    name = runtime_lib_name(runtime_key)
    shim_obj = out_dir / "cute_rt_shim.o"
    _run(["gcc", "-O2", "-fPIC", "-c", str(SHIM_SOURCE), "-o", str(shim_obj)])
    lib = out_dir / name
    _run([
        "g++", "-shared", "-o", str(lib), f"-Wl,-soname,{name}", str(shim_obj),
        "-Wl,--whole-archive", str(paths["dialect_runtime"]), "-Wl,--no-whole-archive",
        str(paths["cudart_static"]), "-lpthread", "-ldl", "-lrt",
        "-Wl,--exclude-libs,libcudart_static.a", "-Wl,--no-undefined", *DETERMINISTIC_LDFLAGS,
        "-s",  # no static symbol table: 28% fewer bytes to checksum on every process's first load
    ])
    shim_obj.unlink()
    return lib


def link_module(obj: Path, out: Path, runtime_lib: Path, final_dir: Path) -> None:
    """Link one variant object into a TVM-FFI module that depends on the runtime library.

    `final_dir` is where the module will live once published; the RUNPATH is relative to it.
    """
    rel = os.path.relpath(runtime_lib.parent, final_dir)
    _run([
        "g++", "-shared", "-o", str(out), str(obj), str(runtime_lib),
        "-L" + str(site_paths()["tvm_ffi_lib"]), "-ltvm_ffi",
        f"-Wl,-rpath,$ORIGIN/{rel}", "-Wl,--no-undefined", "-Wl,--as-needed", *DETERMINISTIC_LDFLAGS,
    ])
