"""The default grouped-quantization spec: axes, variant count, the grouping/layout rule, keys."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelforge.errors import SpecError
from kernelforge.formats import FORMATS
from kernelforge.runtime.tuning import TUNING_AXES, heuristic_rank, tuning_values
from kernelforge.sources import source_files
from kernelforge.spec import OP_SCHEMAS, load_specs
from kernelforge.spec.loader import load_spec

SPEC = Path(__file__).resolve().parents[2] / "specs" / "quantize_grouped.toml"


def test_default_grouped_spec():
    spec = load_spec(SPEC)
    vs = spec.variants
    assert spec.op == "quantize_grouped" and len(vs) == 180
    assert len({v.name for v in vs}) == len({v.symbol for v in vs}) == 180
    assert len({json.dumps(v.canonical(), sort_keys=True) for v in vs}) == 180
    assert sum(v.arch == "sm_90a" for v in vs) == 90
    # One build per dispatch key (the single threads value), so no tuning is needed.
    assert len({v.dispatch_key for v in vs}) == 180 and {v.threads for v in vs} == {128}
    # experts: both layouts; offsets: swizzled only (grouped scale blocks are 128-row tiles).
    combos = {(v.grouping, v.layout) for v in vs}
    assert combos == {("experts", "linear"), ("experts", "swizzled"), ("offsets", "swizzled")}
    assert {(v.format, v.scale_mode) for v in vs} == {(f, m) for f in FORMATS for m in FORMATS[f].scale_modes}
    assert {v.dtype for v in vs} == {"bfloat16", "float16", "float32"}
    assert {v.get("kclass") for v in vs} == {"aligned", "any"}
    assert spec.kclasses["aligned"].to_dict() == load_spec(SPEC.parent / "quantize.toml").kclasses["aligned"].to_dict()
    v = vs[0]
    assert v.name == "quantize_grouped.mxfp8.floor.linear.experts.bfloat16.aligned.sm_90a.t128"
    assert v.dispatch_key == ("quantize_grouped", "mxfp8", "floor", "linear", "experts", "bfloat16", "aligned",
                              "sm_90a")
    assert [a for a, _ in v.coords] == list(OP_SCHEMAS["quantize_grouped"].axes)


def test_offsets_linear_must_be_excluded(tmp_path):
    p = tmp_path / "g.toml"
    text = SPEC.read_text()
    cut = text.index("[[exclude]]                 # grouped scale blocks")
    p.write_text(text[:cut])
    with pytest.raises(SpecError, match=r"invalid \(grouping, layout\) combinations: grouping 'offsets' has "
                                        r"swizzled scales only"):
        load_spec(p)
    p.write_text(text.replace('grouping = ["experts", "offsets"]', 'grouping = ["experts", "rows"]'))
    with pytest.raises(SpecError, match=r"unknown value 'rows'"):
        load_spec(p)


def test_grouped_spec_loads_with_the_others():
    variants = load_specs(sorted(SPEC.parent.glob("*.toml")))
    assert sum(v.op == "quantize_grouped" for v in variants) == 180
    assert len({v.symbol for v in variants}) == len(variants)


def test_sources_and_tuning_are_registered():
    families = Path(source_files("quantize")[-1]).resolve().parent.parent
    files = [f.resolve() for f in source_files("quantize_grouped")]
    # Its own kernel and builder, and quantize's kernel, whose slot mapping the experts kernel uses.
    assert files[-3:] == [families / "quantize_grouped" / "kernel.py", families / "quantize_grouped" / "build.py",
                          families / "quantize" / "kernel.py"]
    assert "blockscale.py" in {f.name for f in files}
    assert TUNING_AXES["quantize_grouped"] == ("threads",)
    v = load_spec(SPEC).variants[0]
    values = tuning_values("quantize_grouped", dict(v.coords))
    assert values == {"threads": 128}
    assert heuristic_rank("quantize_grouped", 0, values) < heuristic_rank("quantize_grouped", 0, {"threads": 256})
