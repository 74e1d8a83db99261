from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from kernelforge.cli.specs import app as specs_app
from kernelforge.spec import load_spec

app = typer.Typer()
app.add_typer(specs_app, name="specs")
runner = CliRunner()


def test_show_table(default_spec):
    r = runner.invoke(app, ["specs", "show", "--spec", str(default_spec), "--wide"])
    assert r.exit_code == 0, r.output
    assert "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1" in r.stdout
    assert "k_multiple_blocks" in r.stdout and "units_per_thread" in r.stdout
    assert "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t256u1" in r.stdout  # both candidates
    assert "240 variants from 1 spec file(s)" in r.stdout


def test_show_filters(default_spec):
    r = runner.invoke(app, ["specs", "show", "--spec", str(default_spec), "--only",
                            "quantize.nvfp4.*", "--arch", "sm_100a"])
    assert r.exit_code == 0, r.output
    assert "24 variants from 1 spec file(s)" in r.stdout
    assert "mxfp8" not in r.stdout


def test_show_json(default_spec):
    r = runner.invoke(app, ["specs", "show", "--spec", str(default_spec), "--format", "json",
                            "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["count"] == 120 and len(data["variants"]) == 120
    assert data["spec_files"] == [str(default_spec.resolve())]
    first = data["variants"][0]
    assert first["name"] == "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1"
    assert first["symbol"].startswith("kf_quantize_mxfp8")
    assert first["axes"]["threads"] == 128
    assert sorted({v["axes"]["threads"] for v in data["variants"]}) == [128, 256]
    assert first["kclass"] == {"cluster": 1, "elements": 0, "k_multiple_blocks": 4, "max_k": 0, "name": "aligned",
                               "vector_bytes": 16}


def test_show_env_spec_dir(default_spec, monkeypatch):
    monkeypatch.setenv("KERNELFORGE_SPEC_DIR", str(default_spec.parent))
    r = runner.invoke(app, ["specs", "show", "--format", "json"])
    assert r.exit_code == 0, r.output
    # Every default spec file of the directory: quantize (240) + rmsnorm_quantize (1120) + the others.
    files = sorted(default_spec.parent.glob("*.toml"))
    assert len(files) > 2
    counts = {f.stem: len(load_spec(f).variants) for f in files}
    assert counts["quantize"] == 240 and counts["rmsnorm_quantize"] == 1120
    assert json.loads(r.stdout)["count"] == sum(counts.values())


@pytest.mark.parametrize("args", [["--arch", "sm_89"], ["--format", "json", "--arch", "sm_89"]])
def test_show_unknown_arch_exits_2(default_spec, args):
    r = runner.invoke(app, ["specs", "show", "--spec", str(default_spec), *args])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: unknown arch 'sm_89'")
    assert "Traceback" not in r.output


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old  # the edit must hit the spec, or the test checks nothing
    return text.replace(old, new)


def test_show_bad_spec_exits_2(default_text, write_spec):
    bad = write_spec(_replace_once(default_text, "threads = [128, 256]", 'threads = ["x"]'))
    r = runner.invoke(app, ["specs", "show", "--spec", str(bad)])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {bad}:")
    assert "[axes] threads" in r.stderr
    assert r.stdout == ""


def test_show_missing_spec_file_exits_2(tmp_path):
    r = runner.invoke(app, ["specs", "show", "--spec", str(tmp_path / "nope.toml")])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and "nope.toml" in r.stderr
