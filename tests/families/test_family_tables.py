"""The built-in families, one folder each, declare the schemas, heuristics and variant catalog
kernelforge has always built, and hash every file their kernel is built from."""
from __future__ import annotations

import hashlib
import itertools

import pytest

from kernelforge.build.keys import canonical_json, variant_key
from kernelforge.registry import builtin_families, families, get_family
from kernelforge.runtime.tuning import TUNING_AXES, heuristic_rank, tuning_values
from kernelforge.sources import OP_SOURCES, PACKAGE_DIR, SHARED_SOURCES, source_files, source_hash
from kernelforge.spec import OP_SCHEMAS, load_specs
from kernelforge.spec.files import resolve_spec_paths

FAMILIES = ("quantize", "quantize_columnwise", "quantize_grouped", "rmsnorm_quantize", "scale_layout")
ORIGINAL_AXES = {  # (dispatch axes, tuning axes)
    "quantize": (("format", "scale_mode", "layout", "dtype", "kclass", "arch"), ("threads", "units_per_thread")),
    "rmsnorm_quantize": (("format", "scale_mode", "layout", "dtype", "residual", "kclass", "arch"),
                         ("elements", "ctas_per_row")),
    "quantize_grouped": (("format", "scale_mode", "layout", "grouping", "dtype", "kclass", "arch"), ("threads",)),
    "quantize_columnwise": (("format", "scale_mode", "layout", "dtype", "outputs", "transform", "kclass", "arch"),
                            ()),
}
ORIGINAL_TUNING_AXES = {"quantize": ("threads", "units_per_thread"), "rmsnorm_quantize": ("elements", "ctas_per_row"),
                        "quantize_grouped": ("threads",)}


def original_heuristic_rank(op, max_k, values):
    if op == "quantize":
        return (values.get("threads") != 128, values.get("units_per_thread") or 0)
    if op == "rmsnorm_quantize":
        return (values.get("elements") != (64 if max_k > 8192 else 32), values.get("ctas_per_row", 1) != 1)
    if op == "quantize_grouped":
        return (values.get("threads") != 128,)
    return ()


FIXED_TOOLCHAIN = {"cutlass_dsl": "fixed", "link": {"cc": "fixed"}}


@pytest.fixture(scope="module")
def catalog():
    return load_specs(resolve_spec_paths(None))


ADDED_FAMILIES = {"scale_layout"}


def test_builtin_families_are_one_folder_each():
    assert list(builtin_families()) == list(FAMILIES)
    assert set(FAMILIES) <= set(families())
    for op in FAMILIES:
        folder = PACKAGE_DIR / "families" / op
        fam = get_family(op)
        assert fam.source_root == folder and fam.spec_files == (folder / "spec.toml",)
        assert fam.builder == f"kernelforge.families.{op}.build:{op}_args"
        assert all(m.startswith(f"kernelforge.families.{op if op != 'quantize_columnwise' else 'quantize'}.")
                   or m.startswith("kernelforge.ops.") for m in fam.public_names().values())


def test_every_kernel_file_is_hashed():
    """Each family hashes its kernel, its builder and any helper its kernel imports, plus the
    shared helpers; an unhashed file there would let an edit serve stale builds."""
    assert SHARED_SOURCES[0] == "formats.py"
    shared = {PACKAGE_DIR / rel for rel in SHARED_SOURCES}
    assert shared == {PACKAGE_DIR / "formats.py", *(PACKAGE_DIR / "kernels").glob("*.py")}
    for op in FAMILIES:
        folder = PACKAGE_DIR / "families" / op
        hashed = set(source_files(op))
        assert {folder / "kernel.py", folder / "build.py"} <= hashed and shared <= hashed
        for helper in folder.glob("*.py"):  # a module the kernel imports is hashed
            if f"from .{helper.stem} import" in (folder / "kernel.py").read_text():
                assert helper in hashed, helper
        assert OP_SOURCES[op] == get_family(op).sources


def test_schemas_unchanged():
    for op, (dispatch, tuning) in ORIGINAL_AXES.items():
        s = OP_SCHEMAS[op]
        assert (s.name, s.dispatch_axes, s.tuning_axes) == (op, dispatch, tuning)
    assert OP_SCHEMAS["rmsnorm_quantize"].kclass_required == ("max_k",)
    assert OP_SCHEMAS["rmsnorm_quantize"].domains["dtype"].choices == ("bfloat16", "float16")
    assert [c.axes for c in OP_SCHEMAS["quantize_grouped"].constraints] == [("format", "scale_mode"),
                                                                             ("grouping", "layout")]
    assert [c.axes for c in OP_SCHEMAS["quantize_columnwise"].constraints] == [("format", "scale_mode"),
                                                                                ("transform", "format", "dtype")]
    assert "dequantize" not in OP_SCHEMAS and "dequantize" not in OP_SOURCES
    with pytest.raises(KeyError):
        OP_SCHEMAS["dequantize"]


def test_tuning_tables_unchanged():
    assert TUNING_AXES == ORIGINAL_TUNING_AXES
    grid = [{"threads": t, "units_per_thread": u, "elements": e, "ctas_per_row": c}
            for t, u, e, c in itertools.product((64, 128, 256), (1, 2, None), (32, 64, 128), (1, 2))]
    for op in (*ORIGINAL_TUNING_AXES, "quantize_columnwise", "dequantize"):
        for max_k, values in itertools.product((0, 2048, 8192, 16384), grid):
            assert heuristic_rank(op, max_k, values) == original_heuristic_rank(op, max_k, values), (op, values)
        assert tuning_values(op, {"threads": 1, "units_per_thread": 2, "elements": 3, "ctas_per_row": 2,
                                  "format": "x"}) == {
            a: v for a, v in (("threads", 1), ("units_per_thread", 2), ("elements", 3), ("ctas_per_row", 2))
            if a in ORIGINAL_TUNING_AXES.get(op, ())}


def test_builders_match_the_declared_signatures():
    """Each built-in family names the builder in its folder's build.py (resolved without compiling)."""
    import importlib.util

    for fam in builtin_families().values():
        module, attr = fam.builder.split(":")
        assert module == f"kernelforge.families.{fam.name}.build" and attr == f"{fam.name}_args"
        assert importlib.util.find_spec(module) is not None
    assert len(get_family("quantize").args) == 4 and len(get_family("rmsnorm_quantize").args) == 7


def test_catalog_is_consistent(catalog):
    """Every built-in family's spec yields variants whose names, symbols and keys are unique, whose
    coordinates follow the family's schema order, one scale_layout variant per default arch."""
    assert {v.op for v in catalog} >= set(FAMILIES)
    assert sum(v.op in ADDED_FAMILIES for v in catalog) == 2  # one per default arch
    assert len({v.name for v in catalog}) == len({v.symbol for v in catalog}) == len(catalog)
    for v in catalog:
        assert [a for a, _ in v.coords] == list(OP_SCHEMAS[v.op].axes), v.name
        assert hashlib.sha256(canonical_json(v.canonical()).encode()).hexdigest()  # canonical JSON of plain data
    keys = {variant_key(v.canonical(), source_hash(v.op), FIXED_TOOLCHAIN) for v in catalog}
    assert len(keys) == len(catalog)  # one key per variant
