"""Fixtures shared by tests/spec and tests/cli (`kernelforge specs show`): the default spec file.

Transfers (merge, import, pull) and installed kernel wheels refuse entries no trusted key signed.
The tests of other properties of transfers (atomicity, damage, conflicts, batches) use unsigned
sources, so the suite opts in for every source here; tests/cache/test_signing.py and
tests/release/ clear this and check the default refusal, signed and forged sources.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["KERNELFORGE_ALLOW_UNSIGNED"] = "*"
os.environ.pop("KERNELFORGE_TRUSTED_KEYS", None)

DEFAULT_SPEC = Path(__file__).resolve().parents[1] / "specs" / "quantize.toml"


@pytest.fixture(scope="session")
def default_spec() -> Path:
    return DEFAULT_SPEC


@pytest.fixture(scope="session")
def variants():
    from kernelforge.spec import load_specs

    return load_specs([DEFAULT_SPEC])


@pytest.fixture
def default_text() -> str:
    return DEFAULT_SPEC.read_text()


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write TOML text to tmp_path/<name> and return the path."""

    def write(text: str, name: str = "bad.toml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return write
