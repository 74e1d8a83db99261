"""`cache.read.installed`: distributions from the dist-info names on sys.path, checked against
importlib.metadata on this very environment and on planted site directories."""
from __future__ import annotations

import importlib.metadata as md
import sys
from pathlib import Path

from kernelforge.cache.read import installed

GROUP = "kernelforge.kernels"


def _dist(site: Path, dirname: str, name: str, version: str, entry_points: str = "") -> None:
    d = site / dirname
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nLong text\nName: no\n")
    if entry_points:
        (d / "entry_points.txt").write_text(entry_points)


def test_versions_agree_with_importlib_metadata_for_every_installed_distribution() -> None:
    listing = installed.installed()
    assert len(listing) > 10  # torch, pytest, typer, ... are installed
    for key in listing:
        assert installed.version(key, listing) == md.version(key), key


def test_kernel_wheels_are_found_by_name_and_entry_point_first_on_the_path_wins(tmp_path, monkeypatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    ep = f"[console_scripts]\nx = y:z\n\n[{GROUP}]\n  kf_a_kernels_sm90a = kf_a_kernels_sm90a \n"
    _dist(first, "kf_a_kernels_sm90a-1.0.dist-info", "kf-a-kernels-sm90a", "1.0", ep)
    _dist(second, "kf_a_kernels_sm90a-0.9.dist-info", "kf-a-kernels-sm90a", "0.9", ep)  # shadowed
    _dist(first, "Kf.B_Kernels_SM100a-2.0.dist-info", "Kf.B-Kernels-SM100a", "2.0",
          f"[{GROUP}]\nb = kf_b_kernels_sm100a\n")
    _dist(first, "not_a_kernel_wheel-1.0.dist-info", "not-a-kernel-wheel", "1.0", f"[{GROUP}]\nc = c\n")
    _dist(first, "kf_d_kernels_sm90a-1.0.dist-info", "kf-d-kernels-sm90a", "1.0", "[other.group]\nd = d\n")
    (tmp_path / "a.zip").write_bytes(b"PK")  # a path entry that is no directory
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a.zip"), str(tmp_path / "missing"), str(first), str(second)])
    found = sorted(installed.kernel_entry_points(GROUP))
    assert found == [
        installed.KernelEntryPoint("b", "kf_b_kernels_sm100a", "Kf.B-Kernels-SM100a", "2.0"),
        installed.KernelEntryPoint("kf_a_kernels_sm90a", "kf_a_kernels_sm90a", "kf-a-kernels-sm90a", "1.0")]
    assert installed.version("KF_A-kernels.sm90a") == "1.0"
    assert installed.version("no-such-distribution") is None


def test_names_are_normalized_as_packaging_normalizes_them() -> None:
    from packaging.utils import canonicalize_name

    names = ["kernelforge-kernels-sm90a", "Kf.B_Kernels_SM100a", "a__b--c..d", "apache_tvm_ffi", "X.Y-z_W"]
    for name in names:
        assert installed.canonical(name) == canonicalize_name(name), name
    for key, dist in installed.installed().items():  # the listing's fast form of an escaped name
        assert key == canonicalize_name(dist.dirname.partition("-")[0]), dist.dirname
