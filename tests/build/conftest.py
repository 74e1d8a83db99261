"""Fixtures of the build tests: one real CPU build shared by a module, and the compiler check.

Tests that compile are marked `slow` and are skipped, with the reason, where CuTe-DSL cannot be
imported. The shared cache is built once per test module through the real `kernelforge build`
(typer's CliRunner, in-process; the compile workers are spawned processes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._http import http_root  # noqa: F401  (a fixture: a loopback HTTP remote)
from tests.build._kf_build_helpers import ARCH, SELECTION, cutlass_problem


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if "slow" in item.keywords and Path(str(item.fspath)).parent == here:
            problem = cutlass_problem()
            if problem:
                item.add_marker(pytest.mark.skip(reason=problem))


@dataclass
class BuiltCache:
    root: Path
    exit_code: int
    output: str
    seconds: float


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> BuiltCache:
    """A fresh cache holding the two NAMES variants, built by a real `kernelforge build`."""
    from typer.testing import CliRunner

    from kernelforge.cli import app

    root = tmp_path_factory.mktemp("built") / "cache"
    t0 = time.perf_counter()
    result = CliRunner().invoke(app, ["build", "--cache", str(root), "--arch", ARCH, "--only", SELECTION,
                                      "-v", "-j", "2"], env={"COLUMNS": "200"})
    seconds = time.perf_counter() - t0
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += f"\n{result.exception!r}"
    return BuiltCache(root, result.exit_code, output, seconds)
