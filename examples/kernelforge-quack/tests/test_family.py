"""The op families and their specs, on the CPU: enumeration, schemas, package metadata, quack's
files in the cache key, import hygiene."""
from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from kf_quack import QUACK_VERSION, __version__
from kf_quack.family import (
    CROSS_ENTROPY,
    DISTRIBUTION,
    FAMILIES,
    QUACK_MODULES,
    RMSNORM,
    SOFTMAX,
)

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))


def variants(family):
    from kernelforge.spec import load_specs

    return [v for v in load_specs(list(family.spec_files)) if v.op == family.name]


def test_specs_enumerate_a_modest_set(families):
    counts = {f.name: len(variants(f)) for f in families}
    assert counts == {RMSNORM: 20, SOFTMAX: 6, CROSS_ENTROPY: 8}
    for f in families:
        names = [v.name for v in variants(f)]
        assert len(set(names)) == len(names)
        assert {v.arch for v in variants(f)} == {"sm_90a"}
        assert all(v.kclass.vector_bytes == 16 and v.n % 8 == 0 for v in variants(f))


def test_rmsnorm_spec_keeps_quacks_default_dtypes(families):
    """out has x's dtype; the weight x's dtype or fp32; the residual none or x's dtype."""
    combos = {(v.dtype, v.weight_dtype, v.out_dtype, v.residual) for v in variants(families[0])}
    assert combos == {(d, w, d, r) for d in ("bfloat16", "float16", "float32") for w in {d, "float32"}
                      for r in ("none", d)}


def test_families_are_registered_with_the_distribution(families):
    from kernelforge.spec import OP_SCHEMAS

    for f in families:
        assert f.name in OP_SCHEMAS
        assert (f.distribution, f.version) == (DISTRIBUTION, __version__)
        assert f.schema.tuning_axes == ()
        assert all(p.is_file() for p in f.source_paths())
    assert families[0].args == ("x", "weight", "bias", "residual", "out", "residual_out", "rstd", "mean", "eps")
    assert families[1].args == ("x", "out")
    assert families[2].args == ("x", "target", "target_logit", "loss", "lse", "dx", "weight", "ignore_index")


def test_quacks_module_files_are_part_of_every_key(families):
    from kernelforge.registry import module_sources
    from kernelforge.sources import source_files

    quack_files = set(module_sources(*QUACK_MODULES))
    assert len(quack_files) == len(QUACK_MODULES)
    for f in families:
        assert quack_files <= set(source_files(f.name)), f.name


def test_pyproject_matches_the_package():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["name"] == DISTRIBUTION
    assert meta["project"]["version"] == __version__  # part of every cache key
    assert f"quack-kernels=={QUACK_VERSION}" in meta["project"]["dependencies"]
    eps = meta["project"]["entry-points"]["kernelforge.ops"]
    assert eps == {f.name: f"kf_quack.family:{f.name.removeprefix('quack_').upper()}_FAMILY" for f in FAMILIES}


def test_the_installed_quack_is_the_pinned_one():
    assert md.version("quack-kernels") == QUACK_VERSION


def test_package_family_and_ops_import_neither_cutlass_nor_quack():
    code = ("import json, sys, kf_quack, kf_quack.family\n"
            "first = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass', 'quack'))\n"
            "import kf_quack.ops\n"
            "then = sorted(m for m in sys.modules if m.split('.')[0] in ('cutlass', 'quack'))\n"
            "print(json.dumps([first, then]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[], []]


BUILDER_IMPORTS = """
import json, sys
from kernelforge.spec import load_specs
from kf_quack.family import ensure_registered
for family in ensure_registered():
    family.load_builder()(load_specs(list(family.spec_files))[0])  # what a build runs, without compiling
print(json.dumps(sorted(m.__file__ for name, m in list(sys.modules.items())
                        if name.split('.')[0] == 'quack' and getattr(m, '__file__', None))))
"""


@pytest.mark.slow
def test_every_quack_module_a_build_loads_is_hashed(families):
    """QUACK_MODULES covers every quack module loaded while the builders make their kernels."""
    proc = subprocess.run([sys.executable, "-c", "import cutlass.cute"], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"CuTe-DSL (cutlass) cannot be imported: {proc.stderr[-200:]}")
    proc = subprocess.run([sys.executable, "-c", BUILDER_IMPORTS], capture_output=True, text=True, env=env())
    assert proc.returncode == 0, proc.stderr
    loaded = {str(Path(p).resolve()) for p in json.loads(proc.stdout.strip().splitlines()[-1])}
    hashed = {str(p) for p in families[0].source_paths()}
    assert loaded and loaded <= hashed, sorted(loaded - hashed)
