"""The link recipe: one small shared runtime library per toolchain, tiny per-variant modules.

The runtime library statically links the CuTe dialect runtime, the shim (cute_rt_shim.c) and
cudart 12.9, so loading a module needs neither the DSL nor libcute_dsl_runtime.so. Modules find
it through a RUNPATH relative to their own location ($ORIGIN), so a cache directory can be moved.
It is also a Python extension (stable ABI, launch.c): the launcher through which the runtime
calls every kernel without importing the tvm_ffi Python package.
"""
from __future__ import annotations

import os
import re
import subprocess
import sysconfig
from pathlib import Path

from ..cache.read.layout import runtime_lib_name
from ..errors import BuildError
from .toolchain import site_paths

SHIM_SOURCE = Path(__file__).with_name("cute_rt_shim.c")
LAUNCH_SOURCE = Path(__file__).with_name("launch.c")
# Undefined symbols the runtime library may keep: the Python C API (the stable ABI, resolved from
# the interpreter that imports it), the TVM-FFI C API (libtvm_ffi.so) and versioned C-library
# symbols. `check_undefined` refuses anything else.
ALLOWED_UNDEFINED = re.compile(r"(_?Py\w+|TVMFFI\w+|_ITM_\w+|__gmon_start__|\w+@GLIBC_[\d.]+|\w+@GCC_[\d.]+)$")
# Linker behaviour that distros set differently through their compiler specs or binutils
# defaults, pinned so that the same inputs give the same bytes on any builder: no build-id
# (a hash that also covers the linker version string), GNU hash only (a "both" default adds a
# .hash section), RUNPATH rather than RPATH (upstream binutils' default; Debian's is RUNPATH).
DETERMINISTIC_LDFLAGS = ["-Wl,--build-id=none", "-Wl,--hash-style=gnu", "-Wl,--enable-new-dtags"]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        # One line: the linker's first error (a full disk, a missing library); the whole command
        # and output follow on later lines only with KERNELFORGE_LOG=debug.
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower() or "no space" in ln.lower()]
        first = (errors or lines or [""])[0]
        detail = f"\n{' '.join(cmd)}\n{proc.stderr.strip()}" if os.environ.get("KERNELFORGE_LOG") == "debug" else ""
        raise BuildError(f"link failed ({Path(cmd[0]).name}, exit {proc.returncode}): {first}{detail}")


def python_include() -> Path:
    """The Python headers the launcher is compiled against (only its stable ABI 3.10 is used)."""
    inc = Path(sysconfig.get_paths()["include"])
    if not (inc / "Python.h").is_file():
        raise BuildError(f"Python.h not found in {inc}: the runtime library's launcher needs the Python "
                         "development headers (e.g. apt install python3-dev)")
    return inc


def link_runtime(out_dir: Path, runtime_key: str) -> Path:
    """Build the shared runtime library into out_dir; return its path."""
    paths = site_paths()
    name = runtime_lib_name(runtime_key)
    shim_obj, launch_obj = out_dir / "cute_rt_shim.o", out_dir / "launch.o"
    _run(["gcc", "-O2", "-fPIC", "-c", str(SHIM_SOURCE), "-o", str(shim_obj)])
    _run(["gcc", "-O2", "-fPIC", "-fvisibility=hidden", "-Wall", "-Werror", "-c", str(LAUNCH_SOURCE),
          "-I", str(python_include()), "-I", str(paths["tvm_ffi_lib"].parent / "include"), "-o", str(launch_obj)])
    lib = out_dir / name
    _run([
        "g++", "-shared", "-o", str(lib), f"-Wl,-soname,{name}", str(shim_obj), str(launch_obj),
        "-Wl,--whole-archive", str(paths["dialect_runtime"]), "-Wl,--no-whole-archive",
        str(paths["cudart_static"]), "-L" + str(paths["tvm_ffi_lib"]), "-ltvm_ffi", "-lpthread", "-ldl", "-lrt",
        "-Wl,--exclude-libs,libcudart_static.a", *DETERMINISTIC_LDFLAGS,
        "-s",  # no static symbol table: 28% fewer bytes to checksum on every process's first load
    ])
    shim_obj.unlink()
    launch_obj.unlink()
    check_undefined(lib)
    return lib


def check_undefined(lib: Path) -> None:
    """Raise BuildError if `lib` leaves any symbol undefined besides the Python C API's, the
    TVM-FFI C API's (libtvm_ffi.so, a needed library) and versioned C-library ones: the check
    -Wl,--no-undefined would make, which the Python symbols rule out."""
    proc = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"nm failed on {lib}: {proc.stderr.strip()}")
    # strong references only ("U"); weak ones ("w", "v") may stay unresolved by definition
    symbols = (f[-1] for f in map(str.split, proc.stdout.splitlines()) if len(f) >= 2 and f[-2] == "U")
    bad = sorted(sym for sym in symbols if not ALLOWED_UNDEFINED.match(sym))
    if bad:
        raise BuildError(f"the runtime library {lib.name} leaves symbols undefined: {', '.join(bad[:10])}")


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
