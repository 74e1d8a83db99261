"""FIFOs, sockets and devices in a cache, a merge source, a bundle or a file:// remote are damage,
never waited on: every command finishes (a real FIFO via os.mkfifo; the CLI in a subprocess with a
30 s timeout) with the documented exit code and one line per problem."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from tests.cache import _cache_helpers as h
from tests.cache._fault_helpers import error_lines, fake_cache, kf, make_fifo, make_socket, tree_digests


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "cache"
    return root, fake_cache(root)


def _dir(root: Path, entry) -> Path:
    return root / "v1" / entry.path


def test_verify_names_each_special_file_once(cache) -> None:
    root, entries = cache
    make_fifo(_dir(root, entries["a"]) / "meta.json")
    make_fifo(_dir(root, entries["b"]) / "stray")  # not a file of the entry: the entry itself is intact
    make_socket(root / "v1" / "sock")
    proc = kf("cache", "verify", "--cache", str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    problems = [line for line in proc.stdout.splitlines() if line.startswith("PROBLEM: ")]
    assert len(problems) == 3, problems
    assert any("a [" in p and "meta.json" in p and "a FIFO" in p for p in problems), problems
    assert any(str(_dir(root, entries["b"]) / "stray") in p and "a FIFO" in p for p in problems), problems
    assert any(str(root / "v1" / "sock") in p and "a socket" in p for p in problems), problems


def test_verify_with_a_fifo_index(cache) -> None:
    root, _ = cache
    make_fifo(root / "v1" / "index.json")
    proc = kf("cache", "verify", "--cache", str(root))
    assert proc.returncode == 1
    problems = [line for line in proc.stdout.splitlines() if line.startswith("PROBLEM: ")]
    index_lines = [p for p in problems if "index.json" in p]
    assert len(index_lines) == 1 and "a FIFO" in index_lines[0], problems


def test_repair_quarantines_special_files_and_keeps_every_intact_entry(cache) -> None:
    root, entries = cache
    intact = {k: v for k, v in tree_digests(root).items() if entries["a"].key not in k}
    make_fifo(_dir(root, entries["a"]) / "meta.json")
    make_fifo(_dir(root, entries["b"]) / "stray")
    make_fifo(root / "v1" / "index.json")
    make_fifo(root / "v1" / "dispatch" / "manifest.json")
    proc = kf("cache", "repair", "--cache", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    quarantined = [line for line in proc.stdout.splitlines() if line.startswith("quarantined: ")]
    assert len(quarantined) == 4, proc.stdout
    assert kf("cache", "verify", "--cache", str(root)).returncode == 0
    assert {k: v for k, v in tree_digests(root).items()} == intact  # b and c kept, byte for byte
    index = json.loads((root / "v1" / "index.json").read_text())["entries"]
    assert set(index) == {entries["b"].key, entries["c"].key}
    fifos = [p for p in (root / "v1" / "quarantine").rglob("*") if p.is_fifo()]
    assert len(fifos) == 4  # moved aside, never opened, never deleted


def test_clean_finishes_removes_debris_and_leaves_a_note(cache) -> None:
    root, entries = cache
    make_fifo(_dir(root, entries["a"]) / "meta.json")  # an indexed entry: not debris
    debris = root / "v1" / "artifacts" / "ff" / ("f" * 64)
    debris.mkdir(parents=True)
    make_fifo(debris / "meta.json")  # an unindexed dir without a usable meta.json: debris
    proc = kf("cache", "clean", "--cache", str(root))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "meta.json" in notes[0] and "a FIFO" in notes[0], proc.stdout
    assert "1 orphan dirs" in proc.stdout and not debris.exists()
    assert (_dir(root, entries["b"]) / "module.so").exists()


@pytest.mark.parametrize("where", ["meta", "module", "index"])
def test_merge_from_a_source_holding_a_fifo(cache, tmp_path: Path, where: str) -> None:
    src, entries = cache
    dest = tmp_path / "dest"
    if where == "index":
        make_fifo(src / "v1" / "index.json")
        proc = kf("cache", "merge", str(src), "--cache", str(dest))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(error_lines(proc)) == 1 and "a FIFO" in proc.stderr, proc.stderr
        return
    make_fifo(_dir(src, entries["a"]) / ("meta.json" if where == "meta" else "module.so"))
    proc = kf("cache", "merge", str(src), "--cache", str(dest))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert len(refused) == 1 and "a [" in refused[0] and "a FIFO" in refused[0], proc.stdout
    assert "merged 2," in proc.stdout
    assert kf("cache", "verify", "--cache", str(dest)).returncode == 0


def test_merge_notes_a_stray_special_file_in_the_source(cache, tmp_path: Path) -> None:
    src, _ = cache
    make_fifo(src / "v1" / "junk")
    proc = kf("cache", "merge", str(src), "--cache", str(tmp_path / "dest"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "a FIFO" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "junk" in notes[0], proc.stdout


def test_export_refuses_an_entry_whose_file_is_a_fifo(cache, tmp_path: Path) -> None:
    root, entries = cache
    make_fifo(_dir(root, entries["a"]) / "module.so")
    proc = kf("cache", "export", str(tmp_path / "b.tar.gz"), "--cache", str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert len(refused) == 1 and "module.so" in refused[0] and "a FIFO" in refused[0], proc.stdout


def test_import_of_a_fifo_bundle(tmp_path: Path) -> None:
    bundle = make_fifo(tmp_path / "b.tar.gz")
    proc = kf("cache", "import", str(bundle), "--cache", str(tmp_path / "c"))
    assert proc.returncode == 2 and error_lines(proc) == [f"error: bundle {bundle} is not a file"], proc.stderr


def test_pull_from_a_file_remote_with_a_fifo_blob(cache, tmp_path: Path) -> None:
    root, entries = cache
    url = f"file://{tmp_path / 'remote'}"
    assert kf("cache", "push", url, "--cache", str(root)).returncode == 0
    sha = entries["a"].sha256
    make_fifo(tmp_path / "remote" / "v1" / "blobs" / sha[:2] / sha)
    proc = kf("cache", "pull", url, "--cache", str(tmp_path / "dest"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert len(refused) == 1 and "a FIFO" in refused[0], proc.stdout


def test_get_or_build_over_a_fifo_meta_json_builds(tmp_path: Path) -> None:
    """The build path: an unindexed directory of the key being built whose meta.json is a FIFO (the
    store tries to adopt an intact entry the index lost before compiling)."""
    import subprocess
    import sys

    root = tmp_path / "cache"
    store = CacheStore(root)
    key = h.key_of("x")
    directory = store.layout.entry_dir(key, "kernel")
    directory.mkdir(parents=True)
    make_fifo(directory / "meta.json")
    code = ("import sys\nfrom kernelforge.cache import CacheStore\nfrom tests.cache import _cache_helpers as h\n"
            f"e, built = CacheStore({str(root)!r}).get_or_build({key!r}, h.fake_build(name='x'))\n"
            "print(built, e.name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "x"], proc.stdout + proc.stderr
    assert kf("cache", "verify", "--cache", str(root)).returncode == 0  # the FIFO's dir went to quarantine
    assert [p for p in (root / "v1" / "quarantine").rglob("meta.json") if p.is_fifo()]


def test_a_fifo_usage_summary_and_config_do_not_block_gc_or_stats(cache) -> None:
    root, _ = cache
    (root / "v1" / "usage").mkdir(exist_ok=True)
    make_fifo(root / "v1" / "usage" / "summary.json")
    make_fifo(root / "v1" / "config.json")
    assert kf("cache", "stats", "--cache", str(root)).returncode == 0
    proc = kf("cache", "gc", "--cache", str(root), "--max-size", "1G")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    os.unlink(root / "v1" / "config.json")
