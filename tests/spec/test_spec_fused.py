"""The default fused RMSNorm+quantize spec: hidden-size classes, variant count, required fields."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelforge.errors import SpecError
from kernelforge.spec import load_specs
from kernelforge.spec.loader import load_spec

SPEC = Path(__file__).resolve().parents[2] / "specs" / "rmsnorm_quantize.toml"


def test_default_fused_spec():
    spec = load_spec(SPEC)
    assert spec.op == "rmsnorm_quantize" and len(spec.variants) == 1120
    bounds = sorted(kc.max_k for kc in spec.kclasses.values())
    assert bounds[0] <= 1024 and bounds[-1] == 32768  # hidden sizes up to 32768 (issue 3)
    assert all(kc.vector_bytes == 16 for kc in spec.kclasses.values())
    # Elements per thread are a tuning axis now, not a K-class field.
    assert spec.axes["elements"] == (32, 64)
    assert all(kc.elements == 0 for kc in spec.kclasses.values())
    assert {x.elements for x in spec.variants} == {32, 64}
    # CTAs per row too (a cluster at h32k only, where rows fill the most threads); none in a K-class.
    assert spec.axes["ctas_per_row"] == (1, 2)
    assert all(kc.cluster == 1 for kc in spec.kclasses.values())
    assert {x.kclass.name for x in spec.variants if x.ctas_per_row == 2} == {"h32k"}
    v = spec.variants[0]
    assert v.name == "rmsnorm_quantize.mxfp8.floor.linear.bfloat16.none.h1k.sm_90a.e32c1"
    assert spec.variants[1].name == "rmsnorm_quantize.mxfp8.floor.linear.bfloat16.none.h1k.sm_90a.e64c1"
    assert {x.residual for x in spec.variants} == {"none", "add"}
    assert {x.dtype for x in spec.variants} == {"bfloat16", "float16"}


def test_fused_spec_requires_hidden_class_fields(tmp_path):
    text = SPEC.read_text().replace("max_k = 1024\n", "", 1)
    p = tmp_path / "f.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=r"f\.toml:\d+: \[kclass\.h1k\]: missing key 'max_k'"):
        load_spec(p)


@pytest.mark.parametrize("new,pattern", [
    ("elements = [32, 48]", r"f\.toml:\d+: \[axes\] elements: invalid value 48; expected a multiple of 32"),
    ("elements = [32, 512]", r"\[axes\] elements: invalid value 512"),
    ("", r"f\.toml:\d+: \[axes\]: missing required axis 'elements'"),
], ids=["not-multiple-of-32", "too-many", "missing"])
def test_fused_spec_checks_the_elements_axis(tmp_path, new, pattern):
    text = SPEC.read_text()
    assert text.count("elements = [32, 64]") == 1
    p = tmp_path / "f.toml"
    p.write_text(text.replace("elements = [32, 64]", new))
    with pytest.raises(SpecError, match=pattern):
        load_spec(p)


def test_fused_spec_rejects_float32(tmp_path):
    p = tmp_path / "f.toml"
    p.write_text(SPEC.read_text().replace('dtype = ["bfloat16", "float16"]', 'dtype = ["bfloat16", "float32"]'))
    with pytest.raises(SpecError, match="unknown value 'float32'"):
        load_spec(p)


def test_both_default_specs_load_together():
    variants = load_specs([SPEC.parent / "quantize.toml", SPEC])
    assert len(variants) == 1360 and len({v.symbol for v in variants}) == 1360
    assert sum(v.op == "quantize" for v in variants) == 240
    assert sum(v.arch == "sm_90a" for v in variants) == 680


def test_a_k_class_cluster_is_refused_by_the_builder_the_axis_sets_it(tmp_path):
    # The CTAs per row come from one place, the `ctas_per_row` tuning axis (the tuner picks it);
    # a K-class `cluster` for this op is refused with one line naming it, never silently ignored.
    pytest.importorskip("cutlass")
    from kernelforge.families.rmsnorm_quantize.build import rmsnorm_quantize_args

    text = SPEC.read_text().replace("max_k = 32768\n", "max_k = 32768\ncluster = 2\n", 1)
    p = tmp_path / "f.toml"
    p.write_text(text)
    v = next(x for x in load_spec(p).variants if x.kclass.name == "h32k" and x.ctas_per_row == 1)
    with pytest.raises(ValueError, match=r"K-class 'h32k': rmsnorm_quantize takes the CTAs per row from the "
                                         r"ctas_per_row axis, not from the K-class's cluster \(got cluster = 2\)"):
        rmsnorm_quantize_args(v)
    ok = next(x for x in load_spec(SPEC).variants if x.kclass.name == "h32k" and x.ctas_per_row == 2)
    kernel, args = rmsnorm_quantize_args(ok)
    assert kernel.cfg.cluster == 2 and kernel.cta_rows == 1 and len(args) == 8
