"""Test set-up: the package importable (installed or from this checkout), its families registered.

The tests work with the package installed (`pip install -e examples/kernelforge-quack`) or only on
the path (PYTHONPATH=examples/kernelforge-quack): `ensure_registered` then declares the families
itself (see kf_quack.family). Either way quack-kernels must be installed: its module files are
part of the families' sources.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # examples/kernelforge-quack
if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))


@pytest.fixture(scope="session")
def families():
    from kf_quack.family import ensure_registered

    return ensure_registered()
