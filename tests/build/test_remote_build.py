"""Remote stores and bundles on a real build, and `kernelforge build --remote` (marked slow: compiles)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelforge.cache import CacheStore, verify
from kernelforge.cache.transfer.bundle import export_bundle, import_bundle
from kernelforge.cache.transfer.remote import pull, push
from tests.build._kf_build_helpers import ARCH, NAMES, SELECTION

pytestmark = pytest.mark.slow


def _build(cache: Path, remote: str, *extra: str):
    from kernelforge.cli import app

    return CliRunner().invoke(app, ["build", "--cache", str(cache), "--arch", ARCH, "--only", SELECTION,
                                    "--remote", remote, "-j", "1", *extra], env={"COLUMNS": "200"})


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


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


def test_build_remote_over_http_is_pull_only_by_default(built_cache, tmp_path: Path, http_root) -> None:
    """A CI builder that may read a shared store but not write it: pull, build, no push, exit 0."""
    pytest.importorskip("aiohttp", reason="fsspec's http backend needs aiohttp (pip install 'fsspec[http]')")
    assert built_cache.exit_code == 0, built_cache.output
    served, url = http_root
    assert push(CacheStore(built_cache.root), served.as_uri()).ok
    before = _tree(served)
    fresh = tmp_path / "fresh"
    res = _build(fresh, url)
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if "read-only" in line]
    assert notes == [f"note: remote {url} is read-only (http/https): pull only, nothing is pushed "
                     "(--remote-mode pull)"], res.stderr
    assert "built 0, up to date 2" in res.output and "pull " in res.output
    assert not any(line.startswith("push ") for line in res.output.splitlines()), res.output
    assert _tree(served) == before
    names = {e.name for e in CacheStore(fresh).index(fresh=True).values() if e.kind == "kernel"}
    assert names == set(NAMES) and verify(CacheStore(fresh)).ok


def test_build_remote_mode_pull_never_writes_a_writable_remote(built_cache, tmp_path: Path) -> None:
    assert built_cache.exit_code == 0, built_cache.output
    remote = tmp_path / "remote"
    res = _build(built_cache.root, remote.as_uri(), "--remote-mode", "pull")
    assert res.exit_code == 0, res.output
    assert "up to date 2" in res.output and not any(line.startswith("push ") for line in res.output.splitlines())
    assert not remote.exists() or _tree(remote) == {}


def test_build_remote_mode_read_write_on_http_is_a_user_error(tmp_path: Path, http_root) -> None:
    _, url = http_root
    cache = tmp_path / "cache"
    res = _build(cache, url, "--remote-mode", "read-write")
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [f"error: remote {url} is read-only (http/https can only be pulled from): "
                                       "--remote-mode read-write cannot push to it; use --remote-mode pull, or a "
                                       "file://, s3:// or gs:// URL"], res.stderr
    assert not (cache / "v1" / "index.json").exists()  # refused before building anything
    from kernelforge.cli import app

    res = CliRunner().invoke(app, ["build", "--cache", str(cache), "--only", SELECTION, "--remote-mode", "pull"])
    assert res.exit_code == 2 and "--remote-mode needs --remote URL" in res.stderr, res.output
