"""kernelforge finds its own families' entry points in the dist-info installed beside its package,
without listing sys.path (registry.own_distribution); elsewhere it falls back to
importlib.metadata. A real wheel of this tree is unpacked as pip lays it out."""
from __future__ import annotations

import importlib.metadata as md
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kernelforge import __version__, registry

REPO = Path(__file__).resolve().parents[2]


def test_the_dist_info_beside_the_package_is_read_in_place(tmp_path) -> None:
    src = tmp_path / "src"
    (src / "kernelforge").mkdir(parents=True)
    # Only the metadata matters here: the wheel's entry_points.txt as the build writes it.
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    (src / "kernelforge" / "__init__.py").write_text(f'__version__ = "{__version__}"\n')
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    site = tmp_path / "site"
    with zipfile.ZipFile(next((tmp_path / "dist").glob("kernelforge-*.whl"))) as zf:
        zf.extractall(site)
    dist = registry.own_distribution(site / "kernelforge")
    assert dist is not None
    found = {(ep.name, ep.value) for ep in dist.entry_points if ep.group == registry.ENTRY_POINT_GROUP}
    declared = registry.read_toml(REPO / "pyproject.toml")["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
    assert found == set(declared.items()) and found
    assert registry.own_distribution(tmp_path / "elsewhere" / "kernelforge") is None


def test_without_a_dist_info_beside_it_the_families_still_load(monkeypatch) -> None:
    calls = []
    real = md.distribution
    monkeypatch.setattr(md, "distribution", lambda name: calls.append(name) or real(name))
    monkeypatch.setattr(registry, "own_distribution", lambda package_dir: None)
    assert {name for name, _ in registry._builtin_declarations()} >= {"quantize"}
    assert calls == ["kernelforge"]
