"""The op-family registry reproduces the tables it replaced, and the cache keys of the whole
default catalog are those of the code before the refactor (byte for byte)."""
from __future__ import annotations

import hashlib
import itertools

import pytest

from kernelforge.build.keys import canonical_json, variant_key
from kernelforge.config import default_spec_dir
from kernelforge.families import builtin_families, families, get_family
from kernelforge.runtime.tuning import TUNING_AXES, heuristic_rank, tuning_values
from kernelforge.sources import OP_SOURCES, PACKAGE_DIR, SHARED_SOURCES, hash_files, source_files, source_hash
from kernelforge.spec import OP_SCHEMAS, load_specs

# The tables as they were written by hand before the op families (kernelforge 0.1.0, commit 0214751).
ORIGINAL_OP_SOURCES = {
    "quantize": ("kernels/quantize.py",),
    "rmsnorm_quantize": ("kernels/dsmem.py", "kernels/rmsnorm_quantize.py"),
    "quantize_grouped": ("kernels/quantize_grouped.py",),
    "quantize_columnwise": ("kernels/scale_tile.py", "kernels/quantize_tiled.py"),
}
ORIGINAL_SHARED = ("formats.py", "kernels/convert.py", "kernels/blockscale.py", "kernels/dependent_launch.py")
ORIGINAL_AXES = {  # (dispatch axes, tuning axes)
    "quantize": (("format", "scale_mode", "layout", "dtype", "kclass", "arch"), ("threads", "units_per_thread")),
    "rmsnorm_quantize": (("format", "scale_mode", "layout", "dtype", "residual", "kclass", "arch"), ("elements",)),
    "quantize_grouped": (("format", "scale_mode", "layout", "grouping", "dtype", "kclass", "arch"), ("threads",)),
    "quantize_columnwise": (("format", "scale_mode", "layout", "dtype", "outputs", "transform", "kclass", "arch"),
                            ()),
}
ORIGINAL_TUNING_AXES = {"quantize": ("threads", "units_per_thread"), "rmsnorm_quantize": ("elements",),
                        "quantize_grouped": ("threads",)}


def original_heuristic_rank(op, max_k, values):
    if op == "quantize":
        return (values.get("threads") != 128, values.get("units_per_thread") or 0)
    if op == "rmsnorm_quantize":
        return (values.get("elements") != (64 if max_k > 8192 else 32),)
    if op == "quantize_grouped":
        return (values.get("threads") != 128,)
    return ()


def original_source_hash(op: str) -> str:
    return hash_files([PACKAGE_DIR / rel for rel in ORIGINAL_SHARED + ORIGINAL_OP_SOURCES[op]])


# sha256 of the canonical JSON of [(name, symbol, canonical variant), ...] over the default spec
# files, computed on the code before the refactor. It changes only when a default spec file
# changes (then update it on purpose, with the spec change).
CATALOG_DIGEST = "35c8526daf80f54f8a2f57fea59e72c5b71228ef96fc1849f6d66d459406e825"
CATALOG_SIZE = 1636
FIXED_TOOLCHAIN = {"cutlass_dsl": "fixed", "link": {"cc": "fixed"}}


@pytest.fixture(scope="module")
def catalog():
    return load_specs(sorted(default_spec_dir().glob("*.toml")))


# Families added after the refactor (their own tests cover them).
ADDED_FAMILIES = {"scale_layout": ("kernels/scale_layout.py",)}


def test_builtin_families_are_the_original_ops():
    assert list(builtin_families()) == [*ORIGINAL_OP_SOURCES, *ADDED_FAMILIES]
    assert set(ORIGINAL_OP_SOURCES) <= set(families())
    assert {op: OP_SOURCES[op] for op in ADDED_FAMILIES} == ADDED_FAMILIES


def test_sources_and_hashes_unchanged():
    assert SHARED_SOURCES == ORIGINAL_SHARED
    for op, own in ORIGINAL_OP_SOURCES.items():
        assert OP_SOURCES[op] == own
        assert source_files(op) == [PACKAGE_DIR / rel for rel in ORIGINAL_SHARED + own]
        assert source_hash(op) == original_source_hash(op), op


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
    grid = [{"threads": t, "units_per_thread": u, "elements": e}
            for t, u, e in itertools.product((64, 128, 256), (1, 2, None), (32, 64, 128))]
    for op in (*ORIGINAL_OP_SOURCES, "dequantize"):
        for max_k, values in itertools.product((0, 2048, 8192, 16384), grid):
            assert heuristic_rank(op, max_k, values) == original_heuristic_rank(op, max_k, values), (op, values)
        assert tuning_values(op, {"threads": 1, "units_per_thread": 2, "elements": 3, "format": "x"}) == {
            a: v for a, v in (("threads", 1), ("units_per_thread", 2), ("elements", 3))
            if a in ORIGINAL_TUNING_AXES.get(op, ())}


def test_builders_match_the_declared_signatures():
    """Each built-in family names a builder in build/compile.py (resolved without compiling)."""
    import importlib.util

    for fam in builtin_families().values():
        module, attr = fam.builder.split(":")
        assert module == "kernelforge.build.compile" and attr == f"{fam.name}_args"
        assert importlib.util.find_spec(module) is not None
    assert len(get_family("quantize").args) == 4 and len(get_family("rmsnorm_quantize").args) == 7


def test_catalog_keys_unchanged(catalog):
    """Every variant's name, symbol and canonical form as before, and its key computed the new
    way equals the key computed from the original tables."""
    added = [v for v in catalog if v.op in ADDED_FAMILIES]
    assert {v.op for v in added} == set(ADDED_FAMILIES) and len(added) == 2  # one per default arch
    catalog = [v for v in catalog if v.op not in ADDED_FAMILIES]
    assert len(catalog) == CATALOG_SIZE
    rows = [(v.name, v.symbol, v.canonical()) for v in catalog]
    assert hashlib.sha256(canonical_json(rows).encode()).hexdigest() == CATALOG_DIGEST
    new = [variant_key(v.canonical(), source_hash(v.op), FIXED_TOOLCHAIN) for v in catalog]
    old = [variant_key(v.canonical(), original_source_hash(v.op), FIXED_TOOLCHAIN) for v in catalog]
    assert new == old
