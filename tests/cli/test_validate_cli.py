"""`kernelforge validate` on a machine without a GPU: every environment problem and every test
that did not pass makes it fail; the GPU itself is faked where the GPU path is checked."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import app
from kernelforge.cli import validate as kv

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")
KEY = "ab" * 32
TESTS = '''
import pytest
pytestmark = pytest.mark.gpu
def test_passes(): pass
def test_skips(): pytest.skip("no reason")
@pytest.mark.xfail(reason="known", strict=True)
def test_xfails(): raise AssertionError
def test_fails(): raise AssertionError("boom")
@pytest.mark.parametrize("i", [1, 2])
def test_more(i): pass
'''


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KERNELFORGE_CACHE_DIR"}
    return subprocess.run([sys.executable, "-m", "kernelforge", "validate", *args], capture_output=True,
                          text=True, env=env, cwd=kv.CHECKOUT)


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def _cache_with_kernel(root: Path, arch: str = "sm_90a") -> CacheStore:
    """A cache holding one (dummy) kernel artifact for `arch`, published through the real store."""
    store = CacheStore(root)
    staging = store.staging_dir()
    (staging / "module.so").write_bytes(b"not really a module")
    store.publish(KEY, staging, kind="kernel", op="quantize", name=f"quantize.fake.{arch}", variant={},
                  arch=arch, toolchain_id="tc", toolchain={}, source_hash="", main_file="module.so",
                  build_time_s=0.0)
    return store


def test_missing_cache_root_fails_naming_it(tmp_path):
    root = tmp_path / "no-such-cache"
    proc = _cli("--cache", str(root))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _last_line(proc.stdout) == f"validate: FAILED: cache root {root} (--cache) does not exist"
    assert "Traceback" not in proc.stdout + proc.stderr


@no_gpu
def test_no_gpu_fails_even_with_a_cache(tmp_path):
    _cache_with_kernel(tmp_path / "cache")
    proc = _cli("--cache", str(tmp_path / "cache"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _last_line(proc.stdout).startswith("validate: FAILED: no usable CUDA device: torch ")
    assert "Traceback" not in proc.stdout + proc.stderr


@no_gpu
def test_no_gpu_fails_on_an_empty_cache(tmp_path):
    proc = _cli("--cache", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no usable CUDA device" in _last_line(proc.stdout)


def test_no_tests_needs_a_kernel(tmp_path):
    proc = _cli("--cache", str(tmp_path), "--no-tests")
    assert proc.returncode == 2 and _last_line(proc.stdout) == f"validate: FAILED: cache {tmp_path} holds no kernel artifact"
    _cache_with_kernel(tmp_path)
    proc = _cli("--cache", str(tmp_path), "--no-tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _last_line(proc.stdout) == "validate: OK: 1 entries verified (GPU tests not run: --no-tests)"


def test_corrupt_artifact_fails(tmp_path):
    store = _cache_with_kernel(tmp_path)
    (store.entry_dir(store.get(KEY)) / "module.so").write_bytes(b"tampered")
    proc = _cli("--cache", str(tmp_path), "--no-tests")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _last_line(proc.stdout) == f"validate: FAILED: 1 problem(s) in 1 entries of {tmp_path}"


def test_outcomes_are_counted_from_a_real_pytest_run(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: fake\n")
    (tmp_path / "test_fake_gpu.py").write_text(TESTS)
    (tmp_path / "test_fake_cpu.py").write_text("def test_cpu(): pass\n")  # deselected: not counted
    outcome = kv.run_gpu_tests(tmp_path / "cache", [tmp_path])
    assert outcome.counts == {"passed": 3, "skipped": 1, "xfailed": 1, "failed": 1}, outcome
    assert outcome.exitstatus == 1 and outcome.returncode == 1
    assert outcome.problem() == "1 failed, 1 skipped, 1 xfailed of 6 GPU tests"


@pytest.mark.parametrize("counts, exitstatus, rc, problem", [
    ({"passed": 264}, 0, 0, None),
    ({"passed": 263, "skipped": 1}, 0, 0, "1 skipped of 264 GPU tests"),
    ({"passed": 263, "xfailed": 1}, 0, 0, "1 xfailed of 264 GPU tests"),
    ({"passed": 263, "xpassed": 1}, 0, 0, "1 xpassed of 264 GPU tests"),
    ({"passed": 1, "error": 2}, 1, 1, "2 error of 3 GPU tests"),
    ({}, 5, 5, "no GPU test ran"),
    ({"passed": 3}, 0, 1, "pytest exited with status 1"),
    ({}, None, -11, "pytest ended without reporting its outcomes (exit status -11)"),
], ids=["passed", "skip", "xfail", "xpass", "error", "none-ran", "bad-rc", "crashed"])
def test_outcome_judgement(counts, exitstatus, rc, problem):
    assert kv.PytestOutcome(counts, exitstatus, rc).problem() == problem


@pytest.fixture
def fake_gpu(monkeypatch):
    """validate with a fake H100 and a fake test run whose counts the test sets."""
    runs = []
    monkeypatch.setattr(kv, "probe_gpu", lambda: kv.Gpu("Fake H100", (9, 0)))

    def run(counts):
        def fake(root, test_dir):
            runs.append((root, test_dir))
            return kv.PytestOutcome(counts, 0, 0)
        monkeypatch.setattr(kv, "run_gpu_tests", fake)
        return runs
    return run


def _invoke(root: Path):
    result = CliRunner().invoke(app, ["validate", "--cache", str(root)], env={"COLUMNS": "200"})
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, _last_line(result.output)


def test_all_passed_validates(tmp_path, fake_gpu):
    _cache_with_kernel(tmp_path)
    runs = fake_gpu({"passed": 264})
    assert _invoke(tmp_path) == (0, "validate: OK: 1 entries verified, arch sm_90a (Fake H100), 264 GPU tests passed")
    assert runs == [(tmp_path, kv.gpu_test_dirs())]


def test_a_skip_fails_validation(tmp_path, fake_gpu):
    _cache_with_kernel(tmp_path)
    fake_gpu({"passed": 263, "skipped": 1})
    assert _invoke(tmp_path) == (1, "validate: FAILED: 1 skipped of 264 GPU tests, arch sm_90a (Fake H100)")


def test_no_kernel_for_the_gpu_arch_fails(tmp_path, fake_gpu):
    _cache_with_kernel(tmp_path, arch="sm_100a")
    runs = fake_gpu({"passed": 264})
    code, line = _invoke(tmp_path)
    assert code == 2 and runs == []
    assert line == (f"validate: FAILED: cache {tmp_path} holds kernels for sm_100a only, none for Fake H100 "
                    "(capability 9.0): run `kernelforge build --arch sm_90a`")
