"""The op family and its spec, on the CPU: enumeration, schema, package metadata, import hygiene."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib
from kf_silu_quant import __version__
from kf_silu_quant.family import DISTRIBUTION, OP, SPEC_FILE

ROOT = Path(__file__).resolve().parents[1]


def variants():
    from kernelforge.spec import load_specs

    return [v for v in load_specs([SPEC_FILE]) if v.op == OP]


def test_spec_enumerates_every_format_mode_layout_dtype_kclass_arch(family):
    vs = variants()
    combos = {(v.format, v.scale_mode) for v in vs}
    assert combos == {("mxfp8", "floor"), ("mxfp8", "rceil"), ("nvfp4", "none")}
    assert {v.layout for v in vs} == {"linear", "swizzled"}
    assert {v.dtype for v in vs} == {"bfloat16", "float16"}
    assert {v.kclass.name for v in vs} == {"aligned", "any"}
    assert {v.arch for v in vs} == {"sm_90a", "sm_100a"}
    assert len(vs) == 3 * 2 * 2 * 2 * 2  # at most two candidates per logical variant: here one
    assert len({v.name for v in vs}) == len(vs)
    assert "silu_mul_quantize.mxfp8.rceil.swizzled.float16.aligned.sm_100a.t128" in {v.name for v in vs}


def test_family_is_registered_with_its_distribution(family):
    from kernelforge.spec import OP_SCHEMAS

    assert family.name == OP and OP in OP_SCHEMAS
    assert (family.distribution, family.version) == (DISTRIBUTION, __version__)
    assert family.args == ("x", "data", "scale", "global_scale")
    assert all(p.is_file() for p in family.source_paths())
    assert family.rank(8192, {"threads": 128}) < family.rank(8192, {"threads": 256})


def test_pyproject_matches_the_package():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["name"] == DISTRIBUTION
    assert meta["project"]["version"] == __version__  # the version is part of every cache key
    assert meta["project"]["entry-points"]["kernelforge.ops"] == {OP: "kf_silu_quant.family:FAMILY"}


def test_family_and_package_import_neither_torch_nor_cutlass():
    code = ("import sys, kf_silu_quant, kf_silu_quant.family; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass')); "
            "assert not bad, bad")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
