"""`kernelforge explain OP ARGS` for a family that has no `format` axis (a plugin's normalization,
say): the call is explained on its own dispatch axes, K in elements, instead of being refused for
a missing format."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
from pathlib import Path

from kernelforge.registry import OpFamily
from kernelforge.schema import Axis, op_schema

FAMILY = OpFamily(
    schema=op_schema("demo_rows", ("dtype", Axis("n", int), "kclass", "arch")),
    sources=("__init__.py",), source_root=Path(__file__).resolve().parent,
    builder="kf_demo_rows:no_builder", args=("x", "out"),
)
'''


def test_explain_takes_a_family_without_a_format_axis(tmp_path):
    site = tmp_path / "site"
    (site / "kf_demo_rows").mkdir(parents=True)
    (site / "kf_demo_rows" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "kf_demo_rows-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kf-demo-rows\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kernelforge.ops]\ndemo_rows = kf_demo_rows:FAMILY\n")
    (tmp_path / "cache").mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), COLUMNS="200")
    env.pop("KERNELFORGE_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "explain", "demo_rows", "shape=8x4096",
                           "dtype=bf16", "n=4096", "--cache", str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # explained: nothing is built (2 was "format=?")
    assert "format" not in proc.stderr and "no layer holds any demo_rows kernel" in proc.stderr, proc.stderr
