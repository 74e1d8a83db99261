"""The kernelforge CLI in a fresh process, as a family's CPU tests use it: build its variants, and ask
`kernelforge explain` how a call resolves on a pretend device (`arch=... device=...`, no GPU),
watching which heavy packages (CuTe-DSL, the kernels' own library) that process imported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence


class Explained(NamedTuple):
    """What `kernelforge explain OP ARGS --format json` did in a fresh process."""

    returncode: int
    doc: dict[str, Any] | None  # its JSON document; None when it printed none
    stderr: str  # without the -X importtime lines
    imported: list[str]  # the modules of the watched top-level packages it imported, sorted


def child_env(*paths: str | os.PathLike[str]) -> dict[str, str]:
    """This environment for a child process: `paths`, then this process's sys.path, on PYTHONPATH;
    no $KERNELFORGE_CACHE_DIR (each command names its cache); a wide terminal (one-line messages)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *sys.path])
    env.pop("KERNELFORGE_CACHE_DIR", None)
    env["COLUMNS"] = "200"
    return env


def run_cli(*args: str, paths: Sequence[str | os.PathLike[str]] = (), importtime: bool = False,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python [-X importtime] -m kernelforge ARGS` in a fresh process (`child_env(*paths)`), captured."""
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "kernelforge", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=child_env(*paths), cwd=cwd)


def explain_json(op: str, args: Sequence[str], cache: Path, *, watch: Sequence[str] = ("cutlass",),
                 paths: Sequence[str | os.PathLike[str]] = ()) -> Explained:
    """`kernelforge explain OP ARGS --cache CACHE --format json` in a fresh process, with the
    modules of the top-level packages `watch` that it imported (from -X importtime)."""
    proc = run_cli("explain", op, *args, "--cache", str(cache), "--format", "json", paths=paths, importtime=True)
    lines = proc.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    return Explained(proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None,
                     "\n".join(line for line in lines if not line.startswith("import time:")),
                     sorted(m for m in imported if m.split(".")[0] in watch))
