"""Test set-up: the package importable (installed or from this checkout) and its family registered.

The tests work with the package installed (`pip install -e examples/kernelforge-silu-quant`)
or only on the path (PYTHONPATH=examples/kernelforge-silu-quant): `ensure_registered` then
declares the family's entry point itself (see kf_silu_quant.family).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # examples/kernelforge-silu-quant
if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))


@pytest.fixture(scope="session")
def family():
    from kf_silu_quant.family import ensure_registered

    return ensure_registered()
