"""When the columnwise op writes linear scales through swizzled scales and the layout pass
(`kernelforge.families.scale_layout.op.staged`, `kernelforge.families.scale_layout.staging`): thresholds per format and output set, the pass's
K-class (whole 32-byte sectors, 16-byte aligned, contiguous), no transform; a card's measured rule
(its tuning table's `staging`) over the shipped one. No GPU needed: the device's measured rule is
what `launch.staging_rule` returns (None: the card has none), set per test."""
from __future__ import annotations

import pytest
import torch

from kernelforge.families.scale_layout.op import staged
from kernelforge.families.scale_layout.staging import PAIRS, STAGED_MIN_ELEMENTS, pair_name, staged_shape
from kernelforge.formats import FORMATS
from kernelforge.ops import launch


@pytest.fixture(autouse=True)
def measured(monkeypatch) -> dict:
    """The device's measured rule: none unless a test puts pairs in it."""
    rule: dict = {}
    monkeypatch.setattr(launch, "staging_rule", lambda dev: rule or None)
    return rule


def _scales(fmt: str, m: int, k: int, rowwise: bool, offset: int = 0) -> tuple[torch.Tensor, ...]:
    """Linear scale matrices of a call (scale [M, K/B] if rowwise, scale_t [K, M/B]), optionally
    starting `offset` bytes into their allocation."""
    b = FORMATS[fmt].block
    shapes = ([(m, k // b)] if rowwise else []) + [(k, m // b)]
    out = []
    for rows, cols in shapes:
        raw = torch.empty(rows * cols + 64, dtype=torch.uint8)
        base = (-raw.data_ptr()) % 16 + offset
        out.append(raw[base:base + rows * cols].view(rows, cols))
    return tuple(out)


@pytest.mark.parametrize("fmt,outputs", sorted(STAGED_MIN_ELEMENTS))
def test_threshold_per_format_and_outputs(fmt, outputs):
    rowwise = outputs == "dual"
    threshold = STAGED_MIN_ELEMENTS[(fmt, outputs)]
    k = 8192
    m_at = threshold // k
    m_below = m_at - 1024
    f = FORMATS[fmt]
    assert staged(f, m_at, k, rowwise, "none", _scales(fmt, m_at, k, rowwise))
    assert not staged(f, m_below, k, rowwise, "none", _scales(fmt, m_below, k, rowwise))
    assert not staged(f, m_at, k, rowwise, "rht", _scales(fmt, m_at, k, rowwise))


def test_unlisted_pairs_never_stage():
    f = FORMATS["nvfp4"]
    assert ("nvfp4", "columnwise") not in STAGED_MIN_ELEMENTS
    assert not staged(f, 16384, 8192, False, "none", _scales("nvfp4", 16384, 8192, False))


def test_whole_sectors_alignment_and_contiguity_are_required():
    f = FORMATS["mxfp8"]
    m, k = 16384, 8192
    assert staged(f, m, k, True, "none", _scales("mxfp8", m, k, True))
    # K/B = 8192/32 + 4 columns: not a whole number of 32-byte sectors per rowwise scale row
    assert not staged(f, m, k + 128, True, "none", _scales("mxfp8", m, k + 128, True))
    # M/B not a multiple of 32: the columnwise scale rows are not whole sectors
    assert not staged(f, m + 32, k, True, "none", _scales("mxfp8", m + 32, k, True))
    # columnwise only: K need not be anything (the pass's last band may be partial)
    assert staged(f, m, k + 100, False, "none", _scales("mxfp8", m, k + 100, False))
    assert not staged(f, m, k, True, "none", _scales("mxfp8", m, k, True, offset=4))
    strided = torch.empty(k, 2 * (m // 32), dtype=torch.uint8)[:, : m // 32]
    assert not staged(f, m, k, False, "none", (strided,))



def test_a_measured_rule_overrides_the_shipped_one_pair_by_pair(measured):
    f8, f4 = FORMATS["mxfp8"], FORMATS["nvfp4"]
    m, k = 16384, 8192
    assert staged(f8, m, k, True, "none", _scales("mxfp8", m, k, True))  # shipped: staged from 1 << 24
    measured.update({"mxfp8.dual": None, "nvfp4.columnwise": 1 << 26})
    assert not staged(f8, m, k, True, "none", _scales("mxfp8", m, k, True))  # measured: never
    assert staged(f4, m, k, False, "none", _scales("nvfp4", m, k, False))  # measured: from 1 << 26
    assert not staged(f4, 4096, k, False, "none", _scales("nvfp4", 4096, k, False))
    # a pair the table does not name keeps the shipped threshold
    t = STAGED_MIN_ELEMENTS[("mxfp4", "dual")]
    assert staged(FORMATS["mxfp4"], t // k, k, True, "none", _scales("mxfp4", t // k, k, True))
    assert not staged(FORMATS["mxfp4"], t // k - 1024, k, True, "none", _scales("mxfp4", t // k - 1024, k, True))
    # the pass's K-class and the transform still decide under a measured rule
    measured["mxfp8.dual"] = 0
    assert not staged(f8, m, k + 128, True, "none", _scales("mxfp8", m, k + 128, True))
    assert not staged(f8, m, k, True, "rht", _scales("mxfp8", m, k, True))


def test_a_measured_rule_decides_every_pair_it_names_and_an_empty_one_none():
    """staged_shape on whole-sector shapes at the thresholds: a measured pair's threshold (or None:
    never) decides, whatever the shipped one; an empty measured rule is the shipped rule."""
    k = 8192
    measured = {pair_name(f, o): (None if f == "nvfp4" else 1 << 24) for f, o in PAIRS}
    for f, o in PAIRS:
        b, rowwise = FORMATS[f].block, o == "dual"
        expected_at = f != "nvfp4"
        assert staged_shape(f, b, (1 << 24) // k, k, rowwise, "none", measured) == expected_at, (f, o)
        assert not staged_shape(f, b, (1 << 24) // k - 1024, k, rowwise, "none", measured), (f, o)
        shipped = STAGED_MIN_ELEMENTS.get((f, o))
        for m in (1024, 2048, 4096, 8192, 16384):
            assert staged_shape(f, b, m, k, rowwise, "none", {}) == staged_shape(f, b, m, k, rowwise, "none") == \
                (shipped is not None and m * k >= shipped), (f, o, m)
