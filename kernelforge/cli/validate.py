"""`kernelforge validate`: verify every cached artifact, then run the GPU tests against it.

Validation passes only if everything was checked: a usable CUDA device, a cache holding kernels
for its arch, every artifact re-hashed, and every GPU test run and passed. A skipped or xfailed
test fails validation, since on a GPU runner it means something was not checked.

Exit codes: 0 validated; 1 an artifact problem or a GPU test not passed (failed, error, skipped,
xfailed, xpassed); 2 the environment cannot validate (no cache at the root, no usable CUDA
device, no kernel for its arch, no GPU tests). The last line always says what was checked.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from ..cache import CacheStore
from ..cache.maintenance.verification import verify_layer
from ..cache.read.layers import EXPLICIT_SOURCES, Layer, present_layers
from ..config import gpu_test_dirs
from ..runtime.arch import arch_runs_on, arch_specific
from ._pytest_outcomes import OUTCOMES_ENV

CHECKOUT = Path(__file__).resolve().parents[2]
PASSED = ("passed", "subtests passed")


class ValidateFailed(Exception):
    """Validation failed; `code` is the exit code (1 checks failed, 2 environment)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Gpu:
    """The CUDA device the GPU tests run on."""

    name: str
    capability: tuple[int, int]

    @property
    def arch(self) -> str:
        """The arch-specific target of this device (e.g. sm_90a)."""
        return arch_specific(self.capability)


@dataclass(frozen=True)
class PytestOutcome:
    """What a pytest run did: outcome category -> count, and pytest's exit status (None if it died)."""

    counts: dict[str, int]
    exitstatus: int | None
    returncode: int

    @property
    def passed(self) -> int:
        return sum(self.counts.get(c, 0) for c in PASSED)

    def problem(self) -> str | None:
        """Why this run does not validate anything, or None when every test ran and passed."""
        if self.exitstatus is None:
            return f"pytest ended without reporting its outcomes (exit status {self.returncode})"
        bad = {c: n for c, n in sorted(self.counts.items()) if c not in PASSED and n}
        if bad:
            total = self.passed + sum(bad.values())
            return ", ".join(f"{n} {c}" for c, n in bad.items()) + f" of {total} GPU tests"
        if self.passed == 0:
            return "no GPU test ran"
        if self.exitstatus != 0 or self.returncode != 0:
            return f"pytest exited with status {self.returncode}"
        return None


def probe_gpu() -> Gpu:
    """The first CUDA device, after a real allocation on it; ValidateFailed (code 2) if unusable."""
    try:
        import torch
    except ImportError as exc:
        raise ValidateFailed(f"torch cannot be imported ({exc}), so no CUDA device is usable", 2) from exc
    if not torch.cuda.is_available():
        raise ValidateFailed(
            f"no usable CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})", 2)
    try:
        gpu = Gpu(torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0)))
        torch.ones(1, device="cuda:0").add_(1)
        torch.cuda.synchronize(0)
    except Exception as exc:  # driver mismatch, a device in a bad state, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValidateFailed(f"CUDA device 0 is not usable: {first}", 2) from exc
    return gpu


def runnable_kernels(stores: list[CacheStore], gpu: Gpu) -> tuple[int, list[str]]:
    """(number of kernel artifacts in `stores` that run on `gpu`, the arches of those kernels)."""
    kernels = [e for store in stores for e in store.iter_entries() if e.kind == "kernel"]
    usable = sorted({e.arch for e in kernels if arch_runs_on(e.arch, gpu.capability)})
    count = sum(arch_runs_on(e.arch, gpu.capability) > 0 for e in kernels)
    if not count:
        present = sorted({e.arch for e in kernels})
        held = f"kernels for {', '.join(present)} only" if present else "no kernel artifact"
        where = ", ".join(str(s.root) for s in stores)
        raise ValidateFailed(
            f"cache {where} holds {held}, none for {gpu.name} (capability "
            f"{gpu.capability[0]}.{gpu.capability[1]}): run `kernelforge build --arch {gpu.arch}`", 2)
    return count, usable


def run_gpu_tests(root: Path | None, test_dirs: list[Path]) -> PytestOutcome:
    """Run the `gpu`-marked tests under `test_dirs` against the cache at `root` (None: the layers
    the runtime resolves by itself), with the shipped pytest.ini of the first; count their outcomes."""
    with tempfile.TemporaryDirectory(prefix="kf-validate-") as tmp:
        outcomes = Path(tmp) / "outcomes.json"
        env = {k: v for k, v in os.environ.items() if root is not None or k != "KERNELFORGE_CACHE_DIR"}
        env.update({**({"KERNELFORGE_CACHE_DIR": str(root)} if root is not None else {}),
                    "KERNELFORGE_REQUIRE_GPU": "1", OUTCOMES_ENV: str(outcomes),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))})
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rfEsxX", "-p", "no:cacheprovider",
               "-c", str(test_dirs[0] / "pytest.ini"), "--rootdir", str(test_dirs[0].parent),
               "-p", "kernelforge.cli._pytest_outcomes", *map(str, test_dirs)]
        rc = subprocess.call(cmd, env=env)
        try:
            data = json.loads(outcomes.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return PytestOutcome({}, None, rc)
    return PytestOutcome({str(k): int(v) for k, v in data["counts"].items()}, int(data["exitstatus"]), rc)


def _verify(layers: list[Layer], *, need_kernels: bool) -> tuple[int, list[CacheStore]]:
    """Verify every layer the runtime would serve; (entries verified, their stores)."""
    if not layers:
        raise ValidateFailed("no cache: the user cache does not exist and no kernel wheel is installed", 2)
    if layers[0].source in EXPLICIT_SOURCES and not layers[0].root.is_dir():
        raise ValidateFailed(f"cache root {layers[0].root} ({layers[0].source}) does not exist", 2)
    stores, entries = [], 0
    for layer in layers:
        if layer.refused:
            typer.echo(f"skipped: {layer.label} ({layer.root}): refused by the runtime: {layer.refused}")
            continue
        report = verify_layer(layer)
        for p in report.problems:
            typer.echo(f"PROBLEM {p}")
        typer.echo(f"verify: {layer.root} ({layer.label}): {report.entries} entries checked, "
                   f"{len(report.problems)} problem(s)")
        if not report.ok:
            raise ValidateFailed(f"{len(report.problems)} problem(s) in {report.entries} entries of {layer.root}", 1)
        entries += report.entries
        stores.append(CacheStore(layer.root))
    if need_kernels and not any(e.kind == "kernel" for s in stores for e in s.iter_entries()):
        raise ValidateFailed(f"cache {', '.join(str(s.root) for s in stores)} holds no kernel artifact", 2)
    return entries, stores


def _validate(cache: Optional[str], tests: bool) -> str:
    """Run every check; the summary of what passed, else ValidateFailed."""
    layers = present_layers(cache)
    entries, stores = _verify(layers, need_kernels=not tests)
    if not tests:
        return f"{entries} entries verified (GPU tests not run: --no-tests)"
    test_dirs = gpu_test_dirs()
    missing = [str(d) for d in test_dirs if not d.is_dir()]
    if missing:
        raise ValidateFailed(f"GPU tests not found at {', '.join(missing)} (reinstall kernelforge)", 2)
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        raise ValidateFailed("the GPU tests need pytest: pip install 'kernelforge[validate]'", 2)
    gpu = probe_gpu()
    kernels, arches = runnable_kernels(stores, gpu)
    where = f"arch {', '.join(arches)} ({gpu.name})"
    typer.echo(f"GPU: {gpu.name}, capability {gpu.capability[0]}.{gpu.capability[1]}; {kernels} kernel(s) for it")
    explicit = layers[0].root if layers[0].source in EXPLICIT_SOURCES else None
    outcome = run_gpu_tests(explicit, test_dirs)
    problem = outcome.problem()
    if problem:
        raise ValidateFailed(f"{problem}, {where}", 1)
    return f"{entries} entries verified, {where}, {outcome.passed} GPU tests passed"


def validate(
    cache: Optional[str] = typer.Option(None, "--cache", help="Cache root (else $KERNELFORGE_CACHE_DIR, else the "
                                        "checkout/user cache and every installed kernel wheel)."),
    tests: bool = typer.Option(True, "--tests/--no-tests", help="Run the GPU test suite after verifying."),
) -> None:
    """Re-hash every artifact, then run every GPU test on this cache; non-zero exit unless all passed.

    Exit codes: 0 validated, 1 an artifact problem or a GPU test not passed (a skip or xfail
    included), 2 no cache, no usable CUDA device or no kernel for its arch.
    """
    try:
        summary = _validate(cache, tests)
    except ValidateFailed as exc:
        typer.echo(f"validate: FAILED: {exc}")
        raise typer.Exit(exc.code) from None
    typer.echo(f"validate: OK: {summary}")
