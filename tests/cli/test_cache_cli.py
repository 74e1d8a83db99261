"""`kernelforge cache ...` through typer's CliRunner."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import cache as cache_cli
from tests.cache import _cache_helpers as h

root_app = typer.Typer()
root_app.add_typer(cache_cli.app, name="cache")
runner = CliRunner()


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    s = CacheStore(tmp_path / "cache")
    from kernelforge.sources import source_hash

    # "a" is current (toolchain tc-aaaa, today's quantize sources); "b" has an old toolchain.
    s.get_or_build(h.key_of("a"), h.fake_build(b"aaaa", name="q_mxfp8_k128", source_hash=source_hash("quantize")))
    s.get_or_build(h.key_of("b"), h.fake_build(b"bb", name="q_nvfp4_k64", toolchain_id="tc-old"))
    return s


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(root_app, ["cache", *args], env=env)


def test_ls_table_and_json(store: CacheStore) -> None:
    res = run("ls", "--cache", str(store.root))
    assert res.exit_code == 0, res.output
    assert "q_mxfp8_k128" in res.output and "q_nvfp4_k64" in res.output
    assert "(from --cache)" in res.output and "2 entries" in res.output

    res = run("ls", "--cache", str(store.root), "--format", "json")
    data = json.loads(res.stdout)
    assert data["root_source"] == "--cache"
    assert {e["name"] for e in data["entries"]} == {"q_mxfp8_k128", "q_nvfp4_k64"}


def test_root_from_env(store: CacheStore) -> None:
    res = run("ls", env={"KERNELFORGE_CACHE_DIR": str(store.root)})
    assert res.exit_code == 0 and "from $KERNELFORGE_CACHE_DIR" in res.output


def test_stats(store: CacheStore) -> None:
    res = run("stats", "--cache", str(store.root))
    assert res.exit_code == 0, res.output
    for label in ("Cache root", "Schema", "Entries", "Total size", "quantize", "sm_90a"):
        assert label in res.output
    data = json.loads(run("stats", "--cache", str(store.root), "--format", "json").stdout)
    assert data["entries"] == 2 and data["by_kind_op_arch"][0]["entries"] == 2


def test_verify_exit_codes(store: CacheStore) -> None:
    res = run("verify", "--cache", str(store.root))
    assert res.exit_code == 0 and "OK: 2 entries verified" in res.output

    path = store.entry_dir(store.index()[h.key_of("a")]) / "module.so"
    path.write_bytes(b"aaab")
    res = run("verify", "--cache", str(store.root))
    assert res.exit_code == 1
    assert "sha256 mismatch" in res.output and "q_mxfp8_k128" in res.output


def test_clean_all(store: CacheStore) -> None:
    res = run("clean", "--cache", str(store.root), "--all")
    assert res.exit_code == 0 and "removed 2 entries" in res.output
    assert store.index() == {}


def test_clean_stale_without_toolchain_module(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kernelforge.build.toolchain", None)  # makes the import fail
    res = run("clean", "--cache", str(store.root), "--stale")
    assert res.exit_code == 2
    assert "toolchain" in res.output
    assert len(store.index()) == 2


def test_clean_stale_with_toolchain(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("kernelforge.build.toolchain")
    fake.current_toolchain_id = lambda: "tc-aaaa"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kernelforge.build.toolchain", fake)
    res = run("clean", "--cache", str(store.root), "--stale")
    assert res.exit_code == 0, res.output
    assert "removed 1 entries" in res.output
    assert set(store.index()) == {h.key_of("a")}


def test_clean_stale_drops_other_kernel_sources(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("kernelforge.build.toolchain")
    fake.current_toolchain_id = lambda: "tc-aaaa"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kernelforge.build.toolchain", fake)
    store.get_or_build(h.key_of("c"), h.fake_build(b"cc", name="q_old_sources", source_hash="0" * 64))
    res = run("clean", "--cache", str(store.root), "--stale")
    assert res.exit_code == 0, res.output
    assert "removed 2 entries" in res.output  # the old toolchain's and the old sources'
    assert set(store.index()) == {h.key_of("a")}
