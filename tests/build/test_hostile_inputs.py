"""`kernelforge build` (a real CPU build) against hostile inputs: a malformed tuning table beside the
specs is refused in one line naming the file and the key path (nothing of it published); an entry
whose meta.json is a FIFO never makes the build wait (the CLI in a subprocess, 30 s timeout)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kernelforge.config import tuning_dir
from tests.build._kf_build_helpers import ARCH, NAMES, SELECTION
from tests.cache._fault_helpers import error_lines, kf, make_fifo

pytestmark = pytest.mark.slow
DEFAULT_SPEC = Path(__file__).resolve().parents[2] / "specs" / "quantize.toml"


@pytest.fixture
def cache(built_cache, tmp_path: Path) -> Path:
    assert built_cache.exit_code == 0, built_cache.output
    root = tmp_path / "cache"
    shutil.copytree(built_cache.root, root, symlinks=True)
    return root


def _index(root: Path) -> dict:
    return json.loads((root / "v1" / "index.json").read_text())["entries"]


def _build(root: Path, *extra: str, spec: Path | None = None):
    spec_args = ("--spec", str(spec)) if spec is not None else ()
    return kf("build", "--cache", str(root), "--arch", ARCH, "--only", SELECTION, "-j", "2", *spec_args, *extra)


@pytest.mark.parametrize("change,expect", [
    ({"choices": [1, 2]}, "choices: expected an object, found a list"),
    ({"choices": {"quantize|dtype=bfloat16": [1, 2]}}, 'choices["quantize|dtype=bfloat16"]: expected an object'),
    ({"device": 12345}, "device: expected a non-empty string, found 12345 (a number)"),
    ({"created": None}, "created: missing"),
], ids=["choices-list", "group-list", "device-number", "created-missing"])
def test_build_refuses_a_malformed_tuning_table_in_one_line(cache: Path, tmp_path: Path, change, expect) -> None:
    specs, tuning = tmp_path / "data" / "specs", tmp_path / "data" / "tuning"
    specs.mkdir(parents=True)
    tuning.mkdir()
    shutil.copy(DEFAULT_SPEC, specs / DEFAULT_SPEC.name)
    committed = sorted(tuning_dir().glob("*.json"))[0]
    table = json.loads(committed.read_text())
    for key, value in change.items():
        if value is None:
            table.pop(key)
        else:
            table[key] = value
    bad = tuning / "bad.json"
    bad.write_text(json.dumps(table))
    tables_before = {k for k, e in _index(cache).items() if e["kind"] == "tuning"}
    proc = _build(cache, spec=specs / DEFAULT_SPEC.name)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: not a kernelforge tuning table ({expect}"), lines
    assert {k for k, e in _index(cache).items() if e["kind"] == "tuning"} == tables_before
    assert kf("cache", "verify", "--cache", str(cache)).returncode == 0


def test_build_over_an_entry_whose_meta_json_is_a_fifo(cache: Path) -> None:
    key = next(k for k, e in _index(cache).items() if e["name"] == NAMES[0])
    entry_dir = cache / "v1" / _index(cache)[key]["path"]
    make_fifo(entry_dir / "meta.json")
    plain = _build(cache)  # sizes only: the entry's files are intact, nothing reads meta.json
    assert plain.returncode == 0, plain.stdout + plain.stderr
    v = kf("cache", "verify", "--cache", str(cache))
    assert v.returncode == 1 and "meta.json (missing or unusable: not a regular file (a FIFO))" in v.stdout, v.stdout
    deep = _build(cache, "--verify")  # re-checks meta.json: the entry is quarantined and rebuilt
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert f"replaced damaged entry {NAMES[0]}" in deep.stdout, deep.stdout
    assert kf("cache", "verify", "--cache", str(cache)).returncode == 0
    assert [p for p in (cache / "v1" / "quarantine").rglob("meta.json") if p.is_fifo()]


def test_build_over_an_unindexed_dir_whose_meta_json_is_a_fifo(cache: Path) -> None:
    """The key's directory is on disk but not indexed: the build first tries to adopt it."""
    index = _index(cache)
    key = next(k for k, e in index.items() if e["name"] == NAMES[1])
    entry_dir = cache / "v1" / index.pop(key)["path"]
    from kernelforge.cache.read.index import write_index

    write_index(cache / "v1" / "index.json", index)
    make_fifo(entry_dir / "meta.json")
    proc = _build(cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "built 1," in proc.stdout, proc.stdout
    assert kf("cache", "verify", "--cache", str(cache)).returncode == 0
    assert os.path.exists(entry_dir / "module.so")


def test_build_into_a_disk_that_fills_up(built_cache, tmp_path: Path) -> None:
    """A fresh build into a tmpfs that holds the kernels and their runtime library but not the tuning
    tables the build imports last: one error line (no traceback), exit 2, a cache that verifies."""
    from tests.cache._fault_helpers import tree_digests
    from tests.cache.test_enospc import tmpfs

    assert built_cache.exit_code == 0, built_cache.output
    index = _index(built_cache.root)
    needed = sum(f["size"] for e in index.values() if e["kind"] != "tuning" for f in e["files"].values())
    with tmpfs(tmp_path / "fs", f"{(needed + 64 * 1024) // 1024}k") as fs:
        root = fs / "cache"
        proc = _build(root)
        assert proc.returncode in (1, 2), proc.stdout + proc.stderr
        errors = [line for line in error_lines(proc) if line.startswith("error: ")]
        assert len(errors) == 1 and "no space left on the device" in errors[0], proc.stdout + proc.stderr
        v = kf("cache", "verify", "--cache", str(root))
        if v.returncode != 0:  # `cache repair` restores it (nothing intact is lost)
            kept = tree_digests(root)
            assert kf("cache", "repair", "--cache", str(root)).returncode == 0
            assert kf("cache", "verify", "--cache", str(root)).returncode == 0
            assert all(tree_digests(root).get(k) == b for k, b in kept.items() if not k.endswith("meta.json"))
        assert not list((root / "v1" / "tmp").glob("stage-*"))  # no half-written table left behind
