"""Remote stores and bundles on a real build, and `kernelforge build --remote` (marked slow: compiles)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelforge.cache import CacheStore, verify
from kernelforge.cache.bundle import export_bundle, import_bundle
from kernelforge.cache.remote import pull, push
from tests.build._kf_build_helpers import ARCH, NAMES, SELECTION

pytestmark = pytest.mark.slow


def _build(cache: Path, remote: str):
    from kernelforge.cli import app

    return CliRunner().invoke(app, ["build", "--cache", str(cache), "--arch", ARCH, "--only", SELECTION,
                                    "--remote", remote, "-j", "1"], env={"COLUMNS": "200"})


def test_real_entries_round_trip(built_cache, tmp_path: Path) -> None:
    assert built_cache.exit_code == 0, built_cache.output
    src = CacheStore(built_cache.root)
    url = (tmp_path / "remote").as_uri()
    pushed = push(src, url)
    assert pushed.ok and len(pushed.transferred) == len(src.index(fresh=True))
    dest = CacheStore(tmp_path / "pulled")
    pulled = pull(dest, url)
    assert pulled.ok and set(dest.index(fresh=True)) == set(src.index(fresh=True)) and verify(dest).ok

    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(src, bundle).ok
    imported = CacheStore(tmp_path / "imported")
    assert import_bundle(imported, bundle).ok and verify(imported).ok
    assert set(imported.index(fresh=True)) == set(src.index(fresh=True))


def test_build_remote_pushes_then_pulls_instead_of_compiling(built_cache, tmp_path: Path) -> None:
    assert built_cache.exit_code == 0, built_cache.output
    url = (tmp_path / "remote").as_uri()
    # Everything is up to date locally: the build pushes the selection (2 kernels + their runtime).
    res = _build(built_cache.root, url)
    assert res.exit_code == 0, res.output
    assert "up to date 2" in res.output and "3 entries transferred" in res.output
    # A fresh cache pulls the selection and compiles nothing; the push after it sends nothing.
    fresh = tmp_path / "fresh"
    res = _build(fresh, url)
    assert res.exit_code == 0, res.output
    assert "built 0, up to date 2" in res.output
    assert "pull" in res.output and "push" in res.output and "0 entries transferred" in res.output
    names = {e.name for e in CacheStore(fresh).index(fresh=True).values() if e.kind == "kernel"}
    assert names == set(NAMES) and verify(CacheStore(fresh)).ok
