"""A refused kernel wheel (built for another kernelforge version) is visible: `explain` names it and
why, `cache verify` fails on it; hints on a runtime-only node (no nvidia-cutlass-dsl) say
`pip install 'kernelforge[build]'`. The wheel is installed by hand into a directory on sys.path
(a package with its manifest, cache and SHA256SUMS, and a .dist-info with the entry point), as pip
would lay it out: no compiler needed."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernelforge
from kernelforge.cache import CacheStore
from kernelforge.cache.read.layers import WHEEL_CACHE_DIR, WHEEL_MANIFEST, WHEEL_SUMS, running_versions
from kernelforge.cli import app
from tests.cli.test_cli_ux import RT_KEY, _publish

PACKAGE = "kernelforge_kernels_sm90a"
CALL = ["explain", "quantize", "shape=128x8192", "format=mxfp8", "dtype=bf16", "scale_mode=floor"]


def _install_kernel_wheel(site: Path, version: str) -> None:
    pkg = site / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    store = CacheStore(pkg / WHEEL_CACHE_DIR)
    _publish(store, RT_KEY, kind="runtime", size=5000)
    _publish(store, "a" * 64)
    store.refresh_views()
    manifest = {"kernelforge": version, "tvm_ffi_abi": running_versions()["tvm_ffi_abi"], "arch": "sm_90a"}
    (pkg / WHEEL_MANIFEST).write_text(json.dumps(manifest))
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(pkg).as_posix()}"
            for p in sorted(pkg.rglob("*")) if p.is_file()]
    (pkg / WHEEL_SUMS).write_text("\n".join(sums) + "\n")
    info = site / f"{PACKAGE}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kernelforge-kernels-sm90a\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[kernelforge.kernels]\n{PACKAGE} = {PACKAGE}\n")


@pytest.fixture
def node(tmp_path: Path, monkeypatch):
    """A node whose only layers are an absent user cache and the kernel wheel installed by `install`;
    `runtime_only()` makes it a node without the compiler (and without a checkout)."""
    import kernelforge.config as config

    monkeypatch.delenv("KERNELFORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the user cache: absent
    monkeypatch.setattr(config, "checkout_root", lambda: None)  # not this checkout's cache/ either
    monkeypatch.setenv("KERNELFORGE_RECORD_USAGE", "0")

    class Node:
        def install(self, version: str) -> None:
            site = tmp_path / f"site-{version}"
            _install_kernel_wheel(site, version)
            monkeypatch.syspath_prepend(str(site))
            importlib.invalidate_caches()

        def runtime_only(self) -> None:
            monkeypatch.setattr(config, "can_build", lambda: False)

    os.chmod(tmp_path, 0o755)
    return Node()


def kf(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_a_current_wheel_serves_and_verifies(node):
    """The hand-made wheel is a good one when built for this kernelforge: the failures below are the refusal."""
    node.install(kernelforge.__version__)
    r = kf("cache", "verify")
    assert r.exit_code == 0, r.output
    r = kf(*CALL)
    assert r.exit_code == 0 and "served by quantize.mxfp8" in r.stdout, r.output


def test_explain_names_the_refused_wheel_and_why(node):
    node.install("0.0.1")
    node.runtime_only()
    r = kf(*CALL)
    assert r.exit_code == 1, r.output
    err = r.stderr
    assert "no layer holds any quantize kernel" in err
    assert "REFUSED wheel kernelforge-kernels-sm90a 0.0.1 (" in err, err
    assert f"built for kernelforge 0.0.1, running {kernelforge.__version__}" in err, err
    assert "pip install 'kernelforge[build]'" in err, err
    assert "build it first" not in err and "pip install -e" not in err and "make build" not in err, err


def test_explain_on_a_build_node_says_how_to_build(node):
    node.install("0.0.1")
    r = kf(*CALL)
    assert r.exit_code == 1, r.output
    assert "REFUSED wheel kernelforge-kernels-sm90a 0.0.1" in r.stderr
    assert "kernelforge build --only 'quantize.*'" in r.stderr and "pip install" not in r.stderr, r.stderr


def test_cache_verify_fails_on_a_refused_wheel(node):
    node.install("0.0.1")
    r = kf("cache", "verify")
    assert r.exit_code == 1, r.output
    assert ("FAILED: wheel kernelforge-kernels-sm90a 0.0.1 is refused by the runtime, none of its kernels is "
            f"served: built for kernelforge 0.0.1, running {kernelforge.__version__}") in r.stdout, r.stdout
    r = kf("cache", "verify", "--format", "json")
    assert r.exit_code == 1, r.output
    layers = json.loads(r.stdout)["layers"]
    assert [layer["refused"] is not None for layer in layers] == [True], layers


def test_kernel_not_built_on_a_runtime_only_node_says_pip_install_the_build_extra(node):
    from kernelforge.runtime.dispatch import build_hint

    node.runtime_only()
    hint = build_hint(Path("/tmp/c"), "quantize", {"format": "mxfp8", "scale_mode": "floor", "layout": "linear",
                                                    "dtype": "bfloat16"}, (9, 0))
    assert "pip install 'kernelforge[build]'" in hint and "kernelforge build --cache /tmp/c --arch sm_90a" in hint
    assert "nvidia-cutlass-dsl is not installed" in hint and "pip install -e" not in hint, hint


def test_the_build_extra_hint_follows_the_install(monkeypatch):
    import kernelforge.config as config
    from kernelforge.build import toolchain

    assert config.build_extra_install() == "pip install -e '.[build]'"  # this checkout
    monkeypatch.setattr(config, "checkout_root", lambda: None)  # an installed wheel
    assert config.build_extra_install() == "pip install 'kernelforge[build]'"
    monkeypatch.setattr(toolchain, "_dist_versions", lambda prefix: {})
    toolchain.toolchain.cache_clear()
    try:
        with pytest.raises(Exception, match=r"pip install 'kernelforge\[build\]'"):
            toolchain.toolchain()
    finally:
        toolchain.toolchain.cache_clear()
