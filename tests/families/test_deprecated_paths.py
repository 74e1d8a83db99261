"""Modules that moved keep their public names for one release: each old import path still
resolves to the very same object, with a DeprecationWarning naming the new place."""
from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("kernelforge.families", "OpFamily", "kernelforge.registry"),
    ("kernelforge.families", "register", "kernelforge.registry"),
    ("kernelforge.families", "find_family", "kernelforge.registry"),
    ("kernelforge.families", "ENTRY_POINT_GROUP", "kernelforge.registry"),
    ("kernelforge.families.builtin", "HALF_DTYPE", "kernelforge.schema"),
    ("kernelforge.families.builtin", "SCALE_MODE_FITS_FORMAT", "kernelforge.schema"),
    ("kernelforge.spec.schema", "Axis", "kernelforge.schema"),
    ("kernelforge.spec.schema", "OP_SCHEMAS", "kernelforge.registry"),
    ("kernelforge.ops.reference", "quantize_ref", "kernelforge.testing.references"),
    ("kernelforge.ops.reference", "global_scale_of_amax", "kernelforge.testing.references"),
    ("kernelforge.ops._common", "output_shapes", "kernelforge.ops.checks"),
    ("kernelforge.ops._common", "kernel_for", "kernelforge.ops.launch"),
    ("kernelforge.ops._common", "remember_fast", "kernelforge.ops.fast_path"),
    ("kernelforge.build.compile", "DTYPES", "kernelforge.kernels"),
]


@pytest.mark.parametrize("old, name, new", MOVED)
def test_old_import_path_warns_and_resolves(old, name, new):
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {new}"):
        value = getattr(importlib.import_module(old), name)
    target = "CUTE_DTYPES" if name == "DTYPES" else name
    assert value is getattr(importlib.import_module(new), target)


def test_the_old_schema_helper_builds_the_same_schema():
    from kernelforge.families import builtin
    from kernelforge.registry import get_family

    with pytest.warns(DeprecationWarning, match="op_schema"):
        old = builtin.schema("quantize", ("format", "scale_mode", "layout", "dtype", "kclass", "arch"),
                             ("threads", "units_per_thread"), (get_family("quantize").schema.constraints[0],))
    assert old == get_family("quantize").schema


def test_a_built_in_family_under_its_old_name():
    from kernelforge.families import builtin
    from kernelforge.registry import get_family

    with pytest.warns(DeprecationWarning, match="kernelforge.families.quantize.family.FAMILY"):
        assert builtin.QUANTIZE is get_family("quantize")
