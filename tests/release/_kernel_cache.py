"""A small real cache shared by the release tests (a plain module: built once per test process)."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.build._kf_build_helpers import ARCH, SELECTION, cutlass_problem

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: no cache, spec or PYTHONPATH of the caller's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KERNELFORGE_CACHE_DIR", "KERNELFORGE_SPEC_DIR", "VIRTUAL_ENV",
                        "SOURCE_DATE_EPOCH")}
    env.update(COLUMNS="200", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


@functools.lru_cache(maxsize=1)
def built_cache() -> Path:
    """A cache holding the two SELECTION variants of ARCH (a real build, ~10 s), plus the committed
    tuning tables; built once per process, removed at exit. Callers copy it before changing it."""
    tmp = Path(tempfile.mkdtemp(prefix="kf-release-"))
    atexit.register(shutil.rmtree, tmp, True)
    root = tmp / "cache"
    subprocess.run([sys.executable, "-m", "kernelforge", "build", "--cache", str(root), "--arch", ARCH,
                    "--only", SELECTION, "-j", "2"], check=True, env=clean_env(PYTHONPATH=str(REPO)),
                   capture_output=True)
    return root


def skip_reason() -> str | None:
    """Why nothing can be compiled here (the slow release tests skip), or None."""
    return cutlass_problem()


def built_or_skip() -> Path:
    """`built_cache()`, or skip the calling test with the reason nothing can be compiled here."""
    import pytest

    problem = skip_reason()
    if problem:
        pytest.skip(problem)
    return built_cache()
