from __future__ import annotations

import pytest

from kernelforge.errors import SpecError
from kernelforge.spec import select


def test_no_filter_keeps_all_in_order(variants):
    assert select(variants) == variants
    assert select(variants, only=[], archs=[]) == variants


def test_only_patterns(variants):
    mx8 = select(variants, only=["quantize.mxfp8.*"])
    assert len(mx8) == 96 and all(v.format == "mxfp8" for v in mx8)
    both = select(variants, only=["quantize.mxfp8.*", "quantize.nvfp4.*"])
    assert len(both) == 96 + 48
    one_candidate = select(variants, only=["quantize.mxfp8.*.t128u1"])
    assert len(one_candidate) == 48 and all(v.threads == 128 for v in one_candidate)
    exact = select(variants, only=["quantize.nvfp4.none.swizzled.float32.any.sm_100a.t128u1"])
    assert [v.name for v in exact] == ["quantize.nvfp4.none.swizzled.float32.any.sm_100a.t128u1"]
    assert select(variants, only=["nothing*"]) == []


def test_archs(variants):
    hopper = select(variants, archs=["sm_90a"])
    assert len(hopper) == 120 and {v.arch for v in hopper} == {"sm_90a"}
    assert select(variants, archs=["sm_120a"]) == []  # known arch, none in the spec
    combined = select(variants, only=["*.swizzled.*"], archs=["sm_100a"])
    assert len(combined) == 60
    assert all(v.layout == "swizzled" and v.arch == "sm_100a" for v in combined)


def test_unknown_arch(variants):
    with pytest.raises(SpecError, match=r"'sm_89'.*sm_90a.*sm_120a"):
        select(variants, archs=["sm_89"])
