"""An op family from an installed package (entry point `kernelforge.ops`) goes through the same
build, keys and runtime as the built-ins: a tiny plugin written to disk reuses the quantize
kernel's builder under its own op name and spec file."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from kernelforge.registry import ENTRY_POINT_GROUP, families, get_family, plugin_families, reload_plugins

REPO = Path(__file__).resolve().parents[2]
OP = "demo_quantize"
DIST, VERSION = "kf-demo-plugin", "0.3.0"
NAMES = ["demo_quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1",
         "demo_quantize.mxfp8.floor.linear.bfloat16.any.sm_90a.t128u1"]

PLUGIN = '''
"""A kernelforge op family: the quantize kernel under another op name, with its own spec file."""
from pathlib import Path

from kernelforge.registry import get_family

HERE = Path(__file__).resolve().parent
QUANTIZE = get_family("quantize")

FAMILY = QUANTIZE._replace(
    schema=QUANTIZE.schema._replace(name="demo_quantize"),
    sources=(QUANTIZE.source_root / "kernel.py", QUANTIZE.source_root / "build.py", "__init__.py"),
    source_root=HERE,
    spec_files=(HERE / "demo_quantize.toml",),
    api=(),
)
'''

SPEC = '''
schema = 1
op = "demo_quantize"

[axes]
format = ["mxfp8"]
scale_mode = ["floor"]
layout = ["linear"]
dtype = ["bfloat16"]
kclass = ["aligned", "any"]
arch = ["sm_90a"]
threads = [128]
units_per_thread = [1]

[kclass.aligned]
k_multiple_blocks = 4
vector_bytes = 16

[kclass.any]
k_multiple_blocks = 1
vector_bytes = 0
'''

RESOLVE = r"""
import json, sys
from kernelforge.runtime.dispatch import DispatchTable
COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
fn, cand = DispatchTable(sys.argv[1]).resolve("demo_quantize", COORDS, (9, 0), 256, 32, 256, 512, 128)
print(json.dumps({"name": cand.entry["name"], "key": cand.entry["key"], "callable": callable(fn),
                  "cutlass": sorted(m for m in sys.modules if m.split(".")[0] == "cutlass")}))
"""


def write_dist(site: Path, name: str, version: str, entry_points: str, files: dict[str, str]) -> None:
    """A minimal installed distribution: its files and a .dist-info with METADATA and entry_points.txt."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_points}\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "site"
    write_dist(site, DIST, VERSION, "demo = kf_demo_plugin:FAMILY",
               {"kf_demo_plugin/__init__.py": PLUGIN, "kf_demo_plugin/demo_quantize.toml": SPEC})
    return site


@pytest.fixture
def on_path(site):
    """The plugin importable in this process (and forgotten again afterwards)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        reload_plugins()
        yield site
    sys.modules.pop("kf_demo_plugin", None)
    reload_plugins()


def env_with(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    env["COLUMNS"] = "200"
    env.pop("KERNELFORGE_CACHE_DIR", None)
    env.pop("KERNELFORGE_SPEC_DIR", None)
    return env


def expected_source_hash(site: Path) -> str:
    from kernelforge.sources import PACKAGE_DIR, SHARED_SOURCES, hash_files

    quantize = PACKAGE_DIR / "families" / "quantize"
    files = [PACKAGE_DIR / s for s in SHARED_SOURCES] + [quantize / "kernel.py", quantize / "build.py",
                                                          site / "kf_demo_plugin" / "__init__.py"]
    return hashlib.sha256(f"{hash_files(files)}\0{DIST}\0{VERSION}".encode()).hexdigest()


def test_plugin_family_registers_with_its_distribution(on_path):
    from kernelforge.sources import source_hash
    from kernelforge.spec import OP_SCHEMAS, load_specs
    from kernelforge.spec.files import resolve_spec_paths

    fam = get_family(OP)
    assert (fam.distribution, fam.version) == (DIST, VERSION)
    assert OP in families() and OP in OP_SCHEMAS
    # The key covers the kernelforge kernel it reuses, the plugin's own file and its version.
    assert source_hash(OP) == expected_source_hash(on_path)
    paths = resolve_spec_paths(None)
    assert on_path / "kf_demo_plugin" / "demo_quantize.toml" in paths  # other plugins may be installed
    names = [v.name for v in load_specs(paths) if v.op == OP]
    assert names == NAMES


def test_builtin_ops_never_scan_entry_points(monkeypatch):
    """Resolving a built-in op's family, schema or source hash does not look for plugins."""
    import importlib.metadata as md

    from kernelforge.runtime.tuning import heuristic_rank
    from kernelforge.sources import source_hash
    from kernelforge.spec import OP_SCHEMAS

    reload_plugins()

    def boom(**kw):
        raise AssertionError("entry points scanned")

    monkeypatch.setattr(md, "entry_points", boom)
    assert get_family("quantize").name == "quantize"
    assert OP_SCHEMAS["quantize"].tuning_axes == ("threads", "units_per_thread")
    assert source_hash("quantize")
    assert heuristic_rank("quantize", 0, {"threads": 128}) == (False, 0)
    reload_plugins()


def test_broken_plugin_warns_once_and_builtins_still_work(tmp_path, on_path, monkeypatch):
    bad = tmp_path / "bad"
    write_dist(bad, "kf-broken", "1.0", "broken = kf_no_such_module:FAMILY\nclash = kf_clash:FAMILY",
               {"kf_clash/__init__.py": PLUGIN.replace('name="demo_quantize"', 'name="quantize"')
                .replace("HERE / \"demo_quantize.toml\"", "HERE / \"none.toml\"")})
    monkeypatch.syspath_prepend(str(bad))
    reload_plugins()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = plugin_families()
            plugin_families()  # cached: no second warning
        messages = [str(w.message) for w in caught]
        assert len(messages) == 2, messages
        assert any("ignoring op plugin 'broken' (kf_no_such_module:FAMILY): ModuleNotFoundError" in m
                   for m in messages), messages
        assert any("ignoring op family 'quantize' of plugin 'clash'" in m for m in messages), messages
        assert OP in found and "quantize" not in found  # the good plugin still loads
        assert get_family("quantize").distribution == ""  # the built-in is never replaced
    finally:
        monkeypatch.undo()  # bad/ off sys.path before the plugins are reloaded
        sys.modules.pop("kf_clash", None)
        reload_plugins()


def test_specs_show_lists_the_plugin_variants(site):
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "specs", "show", "--format", "json",
                           "--only", "demo_quantize.*"], capture_output=True, text=True, env=env_with(site), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [v["name"] for v in data["variants"]] == NAMES
    assert str(site / "kf_demo_plugin" / "demo_quantize.toml") in data["spec_files"]


@pytest.mark.slow
def test_plugin_builds_on_cpu_and_resolves(site, tmp_path, monkeypatch):
    from tests.build._kf_build_helpers import cutlass_problem, toolchain_problem

    problem = cutlass_problem() or toolchain_problem()
    if problem:
        pytest.skip(problem)
    cache = tmp_path / "cache"
    env = env_with(site)
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "build", "--cache", str(cache), "--only",
                           "demo_quantize.*", "-j", "2"], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from kernelforge.build.keys import variant_key
    from kernelforge.build.toolchain import toolchain
    from kernelforge.cache import CacheStore
    from kernelforge.spec import load_specs

    entries = {e.name: e for e in CacheStore(cache).index().values() if e.op == OP}
    assert sorted(entries) == sorted(NAMES), proc.stdout
    src = expected_source_hash(site)
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    try:
        variants = {v.name: v for v in load_specs([site / "kf_demo_plugin" / "demo_quantize.toml"])}
        for name, e in entries.items():
            assert e.source_hash == src
            assert e.key == variant_key(variants[name].canonical(), src, toolchain())
    finally:
        monkeypatch.undo()  # site/ off sys.path before the plugins are reloaded
        sys.modules.pop("kf_demo_plugin", None)
        reload_plugins()
    res = subprocess.run([sys.executable, "-c", RESOLVE, str(cache)], capture_output=True, text=True, env=env,
                         cwd=REPO)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["name"] == NAMES[0] and out["callable"] and out["cutlass"] == []
    assert out["key"] == entries[NAMES[0]].key
