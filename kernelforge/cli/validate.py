"""`kernelforge validate`: verify every cached artifact, then run the GPU tests against it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from ..cache import CacheStore, verify
from ..config import gpu_test_dir, resolve_cache_root


def validate(
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else cache/)."),
    tests: bool = typer.Option(True, "--tests/--no-tests", help="Run the GPU test suite after verifying."),
) -> None:
    """Re-hash every artifact (non-zero exit on any problem), then run the GPU tests on this cache."""
    root, source = resolve_cache_root(cache)
    report = verify(CacheStore(root))
    for p in report.problems:
        typer.echo(f"PROBLEM {p}")
    typer.echo(f"verify: {root} ({source}): {report.entries} entries checked, {len(report.problems)} problem(s)")
    if not report.ok:
        raise typer.Exit(1)
    if not tests:
        return
    test_dir = gpu_test_dir()
    if not test_dir.is_dir():
        typer.echo(f"error: GPU tests not found at {test_dir} (reinstall kernelforge)", err=True)
        raise typer.Exit(2)
    env = {**os.environ, "KERNELFORGE_CACHE_DIR": str(root), "KERNELFORGE_REQUIRE_GPU": "1"}
    rc = subprocess.call([sys.executable, "-m", "pytest", "-m", "gpu", "-q", str(test_dir)], env=env)
    raise typer.Exit(rc)
