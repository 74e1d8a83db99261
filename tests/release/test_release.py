"""Release pipeline: kernel wheels written deterministically, installed with pip into a fresh
runtime-only venv, found by the runtime as a read-only layer with no write anywhere, and
refused with a clear error when built for another kernelforge version.

The venv test is `slow`: it compiles two variants, builds the kernelforge wheel from this tree
and creates a venv with torch==2.13.0 (local CPU wheel), apache-tvm-ffi, filelock, typer, rich.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.build._kf_build_helpers import ARCH, cutlass_problem
from tests.release._kernel_cache import built_cache

REPO = Path(__file__).resolve().parents[2]

COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
RUNTIME_DEPS = ["torch==2.13.0", "apache-tvm-ffi==0.1.15.post2", "filelock", "typer", "rich"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELFORGE_CACHE_DIR", "VIRTUAL_ENV")}
    env.update(COLUMNS="200", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


@pytest.fixture(scope="module")
def built() -> Path:
    """A cache holding the two SELECTION variants (a real build), plus the committed tuning table
    (built once per process, shared with the other release tests: not to be changed)."""
    problem = cutlass_problem()
    if problem:
        pytest.skip(problem)
    return built_cache()


def _package(cache: Path, out: Path) -> Path:
    from kernelforge.cache import CacheStore
    from kernelforge.release.kernels import package_arch

    (wheel,) = package_arch(CacheStore(cache), ARCH, out)  # the built-in ops only: one wheel
    return wheel.path


@pytest.mark.slow
def test_kernel_wheel_is_deterministic_and_well_formed(built: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a, b = _package(built, tmp_path / "a"), _package(built, tmp_path / "b")
    assert a.name == f"kernelforge_kernels_sm90a-0.1.0-cp310-abi3-manylinux_2_34_{platform.machine()}.whl"
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        names = zf.namelist()
        assert names[-1].endswith(".dist-info/RECORD")
        meta = zf.read("kernelforge_kernels_sm90a-0.1.0.dist-info/METADATA").decode()
        assert "Requires-Dist: kernelforge==0.1.0" in meta
        assert "[kernelforge.kernels]\nkernelforge_kernels_sm90a = kernelforge_kernels_sm90a" in \
            zf.read("kernelforge_kernels_sm90a-0.1.0.dist-info/entry_points.txt").decode()
        record = zf.read(names[-1]).decode().splitlines()
        for line in record[:-1]:
            path, digest, size = line.rsplit(",", 2)
            data = zf.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        manifest = json.loads(zf.read("kernelforge_kernels_sm90a/kernelforge_kernels.json"))
        assert manifest["kernelforge"] == "0.1.0" and manifest["tvm_ffi_abi"] and manifest["toolchain_ids"]
        assert manifest["entries"]["kernel"] == 2 and manifest["entries"]["runtime"] == 1
        for info in zf.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            mode = info.external_attr >> 16 & 0o777
            assert mode == (0o755 if info.filename.endswith(".so") else 0o644), info.filename


@pytest.mark.slow
def test_kernel_wheel_carries_only_tables_measured_on_its_kernels_sources(built: Path, tmp_path: Path) -> None:
    """A table measured on other sources of the wheel's ops (an edited kernel, re-tuned since)
    stays out of the wheel; a table that records the sources of a shipped kernel goes in, an older
    one of the same card too (the runtime falls back to it for what a newer table leaves out)."""
    from kernelforge.build.tables import publish_table
    from kernelforge.cache import CacheStore
    from kernelforge.release.kernels import select_entries
    from kernelforge.sources import source_hash

    cache = tmp_path / "cache"
    shutil.copytree(built, cache)
    committed = json.loads((REPO / "kernelforge/data/tuning/nvidia_h100_80gb_hbm3.sm_90a.json").read_text())
    stale = {"quantize": "0" * 64, "rmsnorm_quantize": "1" * 64}
    publish_table(CacheStore(cache), {**committed, "device": "Stale GPU", "sources": stale})
    quantize_only = {**committed, "device": "Quantize GPU", "sources": {"quantize": source_hash("quantize")},
                     "choices": {g: c for g, c in committed["choices"].items() if g.startswith("quantize|")}}
    publish_table(CacheStore(cache), {**quantize_only, "created": "2026-01-02T00:00:00+00:00"})
    publish_table(CacheStore(cache), {**quantize_only, "created": "2026-01-01T00:00:00+00:00"})
    store = CacheStore(cache)
    tables = sorted((e.variant["axes"]["device"], e.variant["axes"]["measured"])
                    for e in select_entries(store.index(fresh=True), ARCH, "") if e.kind == "tuning")
    assert tables == sorted([*_committed_tables(), ("Quantize GPU", "2026-01-01T00:00:00+00:00"),
                             ("Quantize GPU", "2026-01-02T00:00:00+00:00")])
    written = _package(cache, tmp_path / "out")
    with zipfile.ZipFile(written) as zf:
        manifest = json.loads(zf.read("kernelforge_kernels_sm90a/kernelforge_kernels.json"))
    assert manifest["entries"]["tuning"] == len(tables)


def _committed_tables() -> list[tuple[str, str]]:
    tables = [json.loads(p.read_text()) for p in (REPO / "kernelforge" / "data" / "tuning").glob("*.json")]
    return [(t["device"], t["created"]) for t in tables]


def _snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


RESOLVE = """
import json, sys, warnings
from kernelforge.ops.launch import dispatch_table
from kernelforge.errors import KernelNotBuilt
table = dispatch_table()
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn, cand = table.resolve("quantize", %r, (9, 0), 4096, 32, 16, 8192, 128)
    print(json.dumps({"path": cand.entry["main_path"], "layers": [l.label for l in table.layers]}))
except KernelNotBuilt as exc:
    print(json.dumps({"error": str(exc), "warnings": [str(w.message) for w in caught]}))
""" % (COORDS,)


@pytest.mark.slow
def test_installed_kernel_wheel_serves_the_runtime_read_only(built: Path, tmp_path: Path, monkeypatch) -> None:
    kernel_wheel = _package(built, tmp_path / "dist")
    # The kernelforge wheel, built from a copy of this tree (the build writes build/ and egg-info).
    src = tmp_path / "src"
    shutil.copytree(REPO / "kernelforge", src / "kernelforge", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    kf_wheel = next((tmp_path / "dist").glob("kernelforge-*.whl"))
    with zipfile.ZipFile(kf_wheel) as zf:  # what a build and validate need from an installed wheel
        names = set(zf.namelist())
    assert {"kernelforge/build/cute_rt_shim.c", "kernelforge/families/quantize/spec.toml",
            "kernelforge/data/tuning/nvidia_h100_80gb_hbm3.sm_90a.json",
            "kernelforge/validation/conftest.py", "kernelforge/validation/pytest.ini"} <= names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *RUNTIME_DEPS], check=True, capture_output=True, env=_env())
    subprocess.run([*pip, "--no-deps", str(kf_wheel), str(kernel_wheel)], check=True, capture_output=True,
                   env=_env())
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    home = tmp_path / "home"
    (home / "xdg").mkdir(parents=True)
    env = _env(HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"))
    work = tmp_path / "cwd"
    work.mkdir()
    before = _snapshot(site, home)

    ls = subprocess.run([py, "-m", "kernelforge", "cache", "ls", "--format", "json"], cwd=work, env=env,
                        capture_output=True, text=True)
    assert ls.returncode == 0, ls.stderr
    listed = json.loads(ls.stdout)
    wheel_label = "wheel kernelforge-kernels-sm90a 0.1.0"
    assert sorted(e["name"] for e in listed["entries"] if e["kind"] == "kernel") == sorted(
        f"quantize.mxfp8.floor.linear.bfloat16.{k}.sm_90a.t128u1" for k in ("aligned", "any"))
    assert {e["layer"] for e in listed["entries"]} == {wheel_label}
    verify = subprocess.run([py, "-m", "kernelforge", "cache", "verify"], cwd=work, env=env, capture_output=True,
                            text=True)
    # Two kernels, their runtime library and one entry per committed tuning table (one per measured card).
    entries = 3 + len(list((REPO / "kernelforge" / "data" / "tuning").glob("*.json")))
    assert verify.returncode == 0 and f"OK: {entries} entries verified" in verify.stdout, verify.stdout + verify.stderr

    res = subprocess.run([py, "-c", RESOLVE], cwd=work, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    served = json.loads(res.stdout.splitlines()[-1])
    assert served["layers"] == ["user", wheel_label]
    assert served["path"].startswith(str(site / "kernelforge_kernels_sm90a" / "cache" / "v1" / "artifacts"))
    # Nothing written into site-packages; into the user cache only the record of where the kernel
    # wheels are (cache/read/wheel_discovery.py), which a second process reads and leaves as it is.
    after = _snapshot(site, home)
    records = home / "xdg" / "kernelforge" / "v1" / "found-wheels"
    added = {Path(p) for p in set(after) - set(before)}
    assert {p for p in added if p.parent != records} == {records.parents[1], records.parent, records}
    assert len([p for p in added if p.parent == records]) == 1
    changed = {p for p in set(before) & set(after) if before[p] != after[p]}
    assert changed <= {str(home / "xdg")}, changed
    res = subprocess.run([py, "-c", RESOLVE], cwd=work, env=env, capture_output=True, text=True)
    assert res.returncode == 0 and json.loads(res.stdout.splitlines()[-1]) == served, res.stderr
    assert _snapshot(site, home) == after

    # A kernel wheel built for another kernelforge version: refused, and the error says why.
    import kernelforge

    monkeypatch.setattr(kernelforge, "__version__", "0.0.1")
    old = _package(built, tmp_path / "old")
    monkeypatch.undo()
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(old)], check=True, capture_output=True, env=env)
    res = subprocess.run([py, "-c", RESOLVE], cwd=work, env=env, capture_output=True, text=True)
    refused = json.loads(res.stdout.splitlines()[-1])
    assert "built for kernelforge 0.0.1, running 0.1.0" in refused["error"]
    assert "refused: wheel kernelforge-kernels-sm90a 0.0.1" in refused["error"]
    assert any("not using kernel wheel kernelforge-kernels-sm90a 0.0.1" in w for w in refused["warnings"])
    ls = subprocess.run([py, "-m", "kernelforge", "cache", "ls"], cwd=work, env=env, capture_output=True, text=True)
    assert ls.returncode == 0 and "REFUSED by the runtime: built for kernelforge 0.0.1" in ls.stdout, ls.stdout
