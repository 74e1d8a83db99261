"""The hooks and fixtures of GPU tests (a conftest imports them: `from kernelforge.testing.pytest_plugin
import *`): they run against the cache the runtime resolves; skipped with a reason without a
GPU, failed instead where KERNELFORGE_REQUIRE_GPU=1 (what `kernelforge validate` sets): on a
GPU runner a test that did not run is a test that did not pass."""
from __future__ import annotations

import os

import pytest
import torch

REQUIRE = os.environ.get("KERNELFORGE_REQUIRE_GPU") == "1"
NO_GPU = "no CUDA GPU available (GPU tests run on a GPU runner: `kernelforge validate`)"

def pytest_collection_modifyitems(config, items):
    if REQUIRE or torch.cuda.is_available():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


def pytest_runtest_setup(item):
    if REQUIRE and "gpu" in item.keywords and not torch.cuda.is_available():
        pytest.fail("KERNELFORGE_REQUIRE_GPU=1 but " + NO_GPU, pytrace=False)


@pytest.fixture
def poison():
    """Fill a buffer with a recognisable non-zero pattern so unwritten bytes show up."""
    from .inputs import poison as fill

    return fill


@pytest.fixture
def forbid_checked_path(monkeypatch):
    """A context in which the ops' checked (validating) path raises: calls inside it prove that
    the out= fast path served them."""
    from .checks import forbidding_checked_path

    return forbidding_checked_path(monkeypatch)


__all__ = ["NO_GPU", "REQUIRE", "forbid_checked_path", "poison", "pytest_collection_modifyitems",
           "pytest_runtest_setup"]
