"""The toolchain fingerprint: everything outside the kernel source that shapes an artifact.

Read from installed wheel metadata only (no `import cutlass`, no `import tvm_ffi`), so that
an up-to-date check of the whole catalog stays well under the 2 s budget.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import platform
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from ..config import build_extra_install
from ..errors import BuildError

LINK_RECIPE_VERSION = 4  # bump when link.py changes how modules or the runtime are linked
# The C sources compiled into the runtime library (hashed into the link recipe).
RUNTIME_SOURCES = ("cute_rt_shim.c", "launch.c")
# Options that shape the generated code (arch is added per variant).
COMPILE_OPTIONS = "--enable-tvm-ffi --opt-level 3"


def _dist_versions(prefix: str) -> dict[str, str]:
    out = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(prefix):
            out[name] = dist.version
    return dict(sorted(out.items()))


def _find_in_dist(prefix: str, filename: str) -> Path:
    for dist in md.distributions():
        if (dist.metadata["Name"] or "").lower().startswith(prefix):
            for f in dist.files or ():
                if f.name == filename:
                    return Path(dist.locate_file(f))
    raise BuildError(
        f"{filename} not found in any installed '{prefix}*' distribution; "
        f"install the build extra: {build_extra_install()}"
    )


@functools.lru_cache(maxsize=1)
def site_paths() -> dict[str, Path]:
    """Locations of the pieces the link recipe needs (from the installed wheels)."""
    return {
        "dialect_runtime": _find_in_dist("nvidia-cutlass-dsl-libs", "libcuda_dialect_runtime_static.a"),
        "cudart_static": _find_in_dist("nvidia-cuda-runtime", "libcudart_static.a"),
        "tvm_ffi_lib": _find_in_dist("apache-tvm-ffi", "libtvm_ffi.so").parent,
    }


def _compiler_version(cmd: str) -> str:
    try:
        out = subprocess.run([cmd, "--version"], capture_output=True, text=True, check=True).stdout
        return out.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unavailable"


def _linker_version() -> str:
    """First line of `--version` of the linker g++ runs (binutils is not part of g++'s version)."""
    try:
        ld = subprocess.run(["g++", "-print-prog-name=ld"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unavailable"
    return _compiler_version(ld.strip() or "ld")


def _libc() -> str:
    """The C library whose crt objects (crti.o, crtn.o) are linked into every module."""
    name, version = platform.libc_ver()
    return f"{name}-{version}" if name else "unknown"


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, Any]:
    """Canonical description of the compiler stack and link recipe (JSON-able)."""
    dsl = _dist_versions("nvidia-cutlass-dsl")
    if "nvidia-cutlass-dsl" not in dsl:
        raise BuildError(f"nvidia-cutlass-dsl is not installed; install the build extra: {build_extra_install()}")
    tvm = md.version("apache-tvm-ffi")
    return {
        "cutlass_dsl": dsl,  # every nvidia-cutlass-dsl* dist; the libs-cuXY name fixes the CUDA flavour
        "tvm_ffi_abi": ".".join(tvm.split(".")[:2]),  # the C ABI is stable within 0.X
        "compile_options": COMPILE_OPTIONS,
        "link": {
            "recipe": LINK_RECIPE_VERSION,
            "cudart": _dist_versions("nvidia-cuda-runtime"),
            "dialect_runtime_sha256": _sha256_file(site_paths()["dialect_runtime"]),
            "cxx": _compiler_version("g++"),
            "cc": _compiler_version("gcc"),  # compiles the runtime's shim and launcher
            "runtime_sources": {n: _sha256_file(Path(__file__).with_name(n)) for n in RUNTIME_SOURCES},
            # the launcher uses the stable ABI, but the headers' inline code is compiled in
            "python_headers": sysconfig.get_python_version(),
            "ld": _linker_version(),
            "libc": _libc(),
            "host": f"{platform.system().lower()}-{platform.machine()}",
        },
    }


# The public name (`kernelforge.build.toolchain_fingerprint`): a package attribute named
# `toolchain` would be shadowed by this submodule once it is imported.
toolchain_fingerprint = toolchain


def fingerprint_of(tc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(tc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def current_toolchain_id() -> str:
    """sha256 of the canonical toolchain description."""
    return fingerprint_of(toolchain())
