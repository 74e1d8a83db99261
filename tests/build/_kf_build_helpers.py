"""Helpers shared by the build tests (a plain module: test files and spawned workers import it)."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Two variants that differ only in their K-class: the cheapest real selection to compile
# (one tuning candidate, threads = 128, of each; the spec also lists threads = 256).
SELECTION = "quantize.mxfp8.floor.linear.bfloat16.*.t128u1"
ARCH = "sm_90a"
NAMES = (
    "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1",
    "quantize.mxfp8.floor.linear.bfloat16.any.sm_90a.t128u1",
)


@functools.lru_cache(maxsize=1)
def cutlass_problem() -> str | None:
    """Why CuTe-DSL cannot be imported here (checked in a subprocess, once), or None if it can."""
    proc = subprocess.run([sys.executable, "-c", "import cutlass.cute"], capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
    return f"CuTe-DSL (cutlass) cannot be imported, so nothing can be compiled: {last}"


@functools.lru_cache(maxsize=1)
def toolchain_problem() -> str | None:
    """Why the toolchain fingerprint is unavailable (build extra not installed), or None."""
    try:
        from kernelforge.build.toolchain import toolchain

        toolchain()
    except Exception as exc:  # BuildError, or a missing wheel file
        return f"the build toolchain is unavailable: {exc}"
    return None


def kf_cmd(*args: str) -> list[str]:
    """argv of the `kernelforge` command run by this interpreter."""
    return [sys.executable, "-m", "kernelforge", *args]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["COLUMNS"] = "200"  # keep every result line whole
    env.pop("KERNELFORGE_CACHE_DIR", None)
    return env


def pool_task(action: str, i: int) -> int:
    """A WorkerPool task (run in a spawned worker): "die" SIGKILLs its worker, "sigint" sends it
    SIGINT (which workers ignore), "sleep" blocks for 30 s; each returns i * i if it returns."""
    if action == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "sigint":
        os.kill(os.getpid(), signal.SIGINT)
    elif action == "sleep":
        time.sleep(30)
    return i * i
