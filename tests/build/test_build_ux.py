"""Build output a log can use, dry runs, json reports, and the runtime trace, on a real small build."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from tests.build._kf_build_helpers import ARCH, NAMES, REPO, SELECTION, cli_env, kf_cmd

pytestmark = pytest.mark.slow

RESOLVE = r"""
import sys
from kernelforge.runtime.dispatch import DispatchTable
COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
t = DispatchTable(sys.argv[1])
t.resolve("quantize", COORDS, (9, 0), 256, 32, 256, 512, 128, "NVIDIA H100 80GB HBM3")
t.resolve("quantize", COORDS, (9, 0), 8000, 32, 8, 16000, 128)
"""


def test_dry_run_lists_what_the_build_builds_and_json_matches_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    sel = ["--cache", str(root), "--arch", ARCH, "--only", SELECTION, "-j", "2"]
    dry = subprocess.run(kf_cmd("build", *sel, "--dry-run", "--format", "json"), capture_output=True, text=True,
                         env=cli_env(), cwd=REPO)
    assert dry.returncode == 0, dry.stderr
    planned = {v["name"] for v in json.loads(dry.stdout)["variants"] if v["status"] == "would_build"}
    assert planned == set(NAMES)
    assert not (root / "v1" / "index.json").exists()  # a dry run writes nothing
    # Not a terminal: plain progress lines within the period (0.2 s here; 30 s by default).
    proc = subprocess.run(kf_cmd("build", *sel, "--format", "json", "--progress-interval", "0.2"),
                          capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.startswith("progress: ")]
    assert progress and any("ETA" in line and "compiling quantize." in line for line in progress), proc.stderr
    report = json.loads(proc.stdout)
    built = {v["name"] for v in report["variants"] if v["status"] == "built"}
    assert built == planned  # exactly what the dry run listed
    index = CacheStore(root).index()
    for v in report["variants"]:
        assert v["key"] in index and index[v["key"]].name == v["name"]
        assert v["seconds"] > 0 and v["peak_rss_mb"] > 0 and v["reason"].startswith("not built before")
    again = subprocess.run(kf_cmd("build", *sel, "--dry-run"), capture_output=True, text=True, env=cli_env(), cwd=REPO)
    assert "dry run: would build 0, up to date 2" in again.stdout, again.stdout


def test_verbose_build_says_why_it_rebuilds(built_cache, tmp_path: Path) -> None:
    """A cached entry with other kernel sources: -v names the changed ingredient."""
    import shutil

    root = tmp_path / "c"
    shutil.copytree(built_cache.root, root)
    store = CacheStore(root)
    victim = next(e for e in store.index().values() if e.name == NAMES[0])
    store.quarantine_entry(victim.key, "test")
    # re-publish the same variant under another key, as an older build from other sources would be
    staging = store.staging_dir()
    (staging / "module.so").write_bytes(b"old")
    store.publish("e" * 64, staging, kind="kernel", op="quantize", name=victim.name, variant=victim.variant,
                  arch=victim.arch, toolchain_id=victim.toolchain_id, toolchain=victim.toolchain,
                  source_hash="0" * 64, main_file="module.so", build_time_s=0.0, extra=victim.extra)
    dry = subprocess.run(kf_cmd("build", "--cache", str(root), "--arch", ARCH, "--only", SELECTION, "--dry-run"),
                         capture_output=True, text=True, env=cli_env(), cwd=REPO)
    assert f"would build {NAMES[0]}: changed since its last build [eeeeeeeeeeee]: kernel sources of quantize " \
           "changed" in dry.stdout, dry.stdout


def test_runtime_trace_names_layer_entry_and_tuning(built_cache) -> None:
    env = {**cli_env(), "KERNELFORGE_LOG": "debug", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", RESOLVE, str(built_cache.root)], capture_output=True, text=True,
                          env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert f"loaded {NAMES[0]}" in err and " ms (and its runtime library)" in err
    assert f"-> {NAMES[0]}" in err and "from layer --cache" in err or f"from layer {built_cache.root}" in err
    assert "K-class aligned" in err and ("tuning table" in err or "heuristic" in err)
    assert "rejected: K-class aligned does not accept K=8000" in err
    quiet = subprocess.run([sys.executable, "-c", RESOLVE, str(built_cache.root)], capture_output=True, text=True,
                           env={**env, "KERNELFORGE_LOG": ""}, cwd=REPO)
    assert quiet.returncode == 0 and quiet.stderr == ""  # off by default
