from __future__ import annotations

import dataclasses
import json
import pickle
import re
import subprocess
import sys

import pytest

from kernelforge.formats import FORMATS
from kernelforge.spec import (
    ARCH_CAPABILITY,
    ARCHES,
    OP_SCHEMAS,
    KClass,
    arch_runs_on,
    load_spec,
    load_specs,
)

FIRST = "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1"


def test_default_spec_has_240_unique_variants(variants):
    assert len(variants) == 240
    assert len({v.name for v in variants}) == 240
    assert len({v.symbol for v in variants}) == 240
    assert len({json.dumps(v.canonical(), sort_keys=True) for v in variants}) == 240
    assert len(set(variants)) == 240
    assert len({v.dispatch_key for v in variants}) == 120  # two tuning candidates per dispatch key


def _candidates(variants, axis: str) -> dict[tuple, list]:
    """dispatch key -> the values of tuning axis `axis` of the variants with that key."""
    out: dict[tuple, list] = {}
    for v in variants:
        out.setdefault(v.dispatch_key, []).append(v.get(axis))
    return out


def test_default_specs_have_both_tuning_candidates_per_dispatch_key(variants, default_spec):
    # quantize: threads 128 and 256 (one unit per thread) for every dispatch key.
    by_key = _candidates(variants, "threads")
    assert len(by_key) == 120
    assert all(sorted(ts) == [128, 256] for ts in by_key.values()), by_key
    assert {v.get("units_per_thread") for v in variants} == {1}
    names = {v.name for v in variants}
    for v in variants:
        assert v.name.endswith(f".t{v.threads}u1"), v.name
        other = 384 - v.threads
        twin = v.name[: -len(f"t{v.threads}u1")] + f"t{other}u1"
        assert twin in names, twin  # same name but for the candidate suffix

    # rmsnorm_quantize: elements 32 and 64 for every dispatch key (the K-class no longer fixes it),
    # each with one CTA per row, and at h32k also with 2-CTA clusters.
    fused = load_specs([default_spec.parent / "rmsnorm_quantize.toml"])
    assert len(fused) == 1120
    by_key = {k: sorted(zip(_candidates(fused, "elements")[k], ctas))
              for k, ctas in _candidates(fused, "ctas_per_row").items()}
    assert len(by_key) == 480
    h32k = {v.dispatch_key for v in fused if v.kclass.name == "h32k"}
    assert len(h32k) == 80
    assert all(c == ([(32, 1), (32, 2), (64, 1), (64, 2)] if k in h32k else [(32, 1), (64, 1)])
               for k, c in by_key.items()), by_key
    names = {v.name for v in fused}
    for v in fused:
        assert v.name.endswith(f".e{v.elements}c{v.ctas_per_row}"), v.name
        assert v.kclass.elements == 0, v.kclass
        twin = v.name[: -len(f"e{v.elements}c{v.ctas_per_row}")] + f"e{96 - v.elements}c{v.ctas_per_row}"
        assert twin in names, twin
    # Candidates of one dispatch key are distinct kernels: distinct symbols and canonical forms.
    assert len({v.symbol for v in fused}) == 1120
    assert len({json.dumps(v.canonical(), sort_keys=True) for v in fused}) == 1120


def test_only_valid_format_mode_pairs(variants):
    pairs = {(v.format, v.scale_mode) for v in variants}
    assert pairs == {(f, m) for f, fmt in FORMATS.items() for m in fmt.scale_modes}


def test_spec_record(variants, default_spec):
    spec = load_spec(default_spec)
    assert spec.op == "quantize" and spec.schema_version == 1
    assert spec.path == str(default_spec)
    assert spec.axes["arch"] == ("sm_90a", "sm_100a")
    assert spec.kclasses == {"aligned": KClass("aligned", 4, 16), "any": KClass("any", 1, 0)}
    assert list(spec.variants) == variants


def test_variant_accessors(variants, default_spec):
    v = variants[0]
    assert v.name == FIRST
    assert v.symbol == "kf_" + FIRST.replace(".", "_")
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v.symbol)
    assert (v.format, v.scale_mode, v.layout, v.dtype, v.arch) == (
        "mxfp8", "floor", "linear", "bfloat16", "sm_90a")
    assert v.threads == 128 and v.get("units_per_thread") == 1
    assert v.get("kclass") == "aligned" and v.kclass == KClass("aligned", 4, 16)
    assert v.dispatch_key == ("quantize", "mxfp8", "floor", "linear", "bfloat16", "aligned",
                              "sm_90a")
    assert [a for a, _ in v.coords] == list(OP_SCHEMAS["quantize"].axes)
    assert v.spec_file == str(default_spec)
    with pytest.raises(AttributeError, match="no axis 'colour'"):
        _ = v.colour
    with pytest.raises(KeyError, match="colour"):
        v.get("colour")
    assert pickle.loads(pickle.dumps(v)) == v


def test_spec_file_not_part_of_identity(variants):
    v = variants[0]
    w = dataclasses.replace(v, spec_file="elsewhere.toml")
    assert v == w and hash(v) == hash(w) and v.canonical() == w.canonical()


def test_canonical_golden_and_stable(variants, default_spec):
    assert variants[0].canonical() == {
        "axes": {"arch": "sm_90a", "dtype": "bfloat16", "format": "mxfp8", "kclass": "aligned",
                 "layout": "linear", "scale_mode": "floor", "threads": 128,
                 "units_per_thread": 1},
        "kclass": {"cluster": 1, "elements": 0, "k_multiple_blocks": 4, "max_k": 0, "name": "aligned",
                   "vector_bytes": 16},
        "op": "quantize",
    }
    again = load_specs([default_spec])
    assert [json.dumps(v.canonical()) for v in again] == [
        json.dumps(v.canonical()) for v in variants]
    c = variants[0].canonical()
    assert list(c) == sorted(c) and list(c["axes"]) == sorted(c["axes"])


def _other_value(axis: str, value):
    dom = OP_SCHEMAS["quantize"].domains[axis]
    if dom.kclass:
        return "any" if value == "aligned" else "aligned"
    if dom.choices:
        return next(x for x in dom.choices if x != value)
    return value + 32 if axis == "threads" else value + 1


@pytest.mark.parametrize("axis", OP_SCHEMAS["quantize"].axes)
def test_canonical_sensitive_to_every_axis(variants, axis):
    v = variants[0]
    coords = tuple((a, _other_value(a, x) if a == axis else x) for a, x in v.coords)
    w = dataclasses.replace(v, coords=coords)
    assert w.canonical() != v.canonical()
    assert w.name != v.name and w.symbol != v.symbol


@pytest.mark.parametrize("change", [{"k_multiple_blocks": 8}, {"vector_bytes": 8},
                                    {"name": "aligned2"}])
def test_canonical_sensitive_to_kclass_params(variants, change):
    v = variants[0]
    w = dataclasses.replace(v, kclass=v.kclass._replace(**change))
    assert w.canonical() != v.canonical()
    assert w != v


def test_kclass_param_in_file_changes_canonical(variants, default_text, write_spec):
    text = default_text.replace("vector_bytes = 16", "vector_bytes = 8")
    changed = load_specs([write_spec(text, "q.toml")])
    assert [v.name for v in changed] == [v.name for v in variants]
    assert changed[0].canonical() != variants[0].canonical()
    assert changed[0].canonical()["kclass"]["vector_bytes"] == 8


def test_kclass_accepts_and_specificity():
    aligned, any_ = KClass("aligned", 4, 16), KClass("any", 1, 0)
    assert aligned.accepts(8 * 32, 32, 256, 4096)
    assert not aligned.accepts(6 * 32, 32, 256, 4096)  # K not a multiple of 4 blocks
    assert not aligned.accepts(8 * 32, 32, 8, 4096)  # pointer only 8-byte aligned
    assert not aligned.accepts(8 * 32, 32, 16, 4104)  # row stride not 16-byte aligned
    assert any_.accepts(3 * 16, 16, 1, 3)
    assert aligned.specificity > any_.specificity
    assert max([any_, aligned], key=lambda k: k.specificity) is aligned
    assert KClass.from_dict(aligned.to_dict()) == aligned


def test_hidden_size_classes_bound_k_and_the_tightest_is_most_specialized():
    h1k = KClass("h1k", 1, 16, max_k=1024, elements=32)
    h4k = KClass("h4k", 1, 16, max_k=4096, elements=64, cluster=2)
    unbounded = KClass("any16", 1, 16)
    assert h1k.accepts(1024, 16, 16, 2048) and not h1k.accepts(1040, 16, 16, 2080)
    assert h4k.accepts(4096, 32, 16, 8192) and not h4k.accepts(4128, 32, 16, 8256)
    assert unbounded.accepts(1 << 20, 32, 16, 1 << 21)
    assert h1k.specificity > h4k.specificity > unbounded.specificity
    assert KClass.from_dict(h1k.to_dict()) == h1k


def test_kclass_from_dict_rejects_bad():
    from kernelforge.errors import SpecError

    with pytest.raises(SpecError, match="vector_bytes"):
        KClass.from_dict({"name": "x", "k_multiple_blocks": 1})
    with pytest.raises(SpecError, match="k_multiple_blocks"):
        KClass.from_dict({"name": "x", "k_multiple_blocks": 0, "vector_bytes": 0})
    with pytest.raises(SpecError, match="elements"):
        KClass.from_dict({"name": "x", "k_multiple_blocks": 1, "vector_bytes": 16, "elements": 48})
    with pytest.raises(SpecError, match="cluster"):
        KClass.from_dict({"name": "x", "k_multiple_blocks": 1, "vector_bytes": 16, "elements": 32, "cluster": 3})
    with pytest.raises(SpecError, match="max_k"):
        KClass.from_dict({"name": "x", "k_multiple_blocks": 1, "vector_bytes": 16, "max_k": -1})


def test_arch_tables():
    assert set(ARCH_CAPABILITY) == set(ARCHES)
    assert ARCH_CAPABILITY["sm_90a"] == (9, 0)
    assert arch_runs_on("sm_100a", (10, 0)) and not arch_runs_on("sm_100a", (10, 3))
    assert arch_runs_on("sm_100f", (10, 3)) and not arch_runs_on("sm_100f", (12, 0))
    assert not arch_runs_on("sm_90a", (10, 0))


def test_spec_package_imports_neither_torch_nor_cutlass():
    code = ("import sys, kernelforge.spec, kernelforge.spec.loader; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
