"""`kernelforge tune --only ... --update TABLE`: a partial tuning run merged into a card's earlier
table (`kernelforge.tuner.merge`), on the committed H100 table; the CLI's bad inputs need no GPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kernelforge.cache.read.table_schema import validate_table
from kernelforge.cli import app
from kernelforge.tuner.merge import merge_tables

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "kernelforge" / "data" / "tuning" / "nvidia_h100_80gb_hbm3.sm_90a.json"
BASE = json.loads(COMMITTED.read_text())
QUANTIZE = sorted(g for g in BASE["choices"] if g.startswith("quantize|"))
NEW_SOURCES = "f" * 64


def _op(group: str) -> str:
    return group.split("|", 1)[0]


def _part(groups: list[str], quantize_sources: str) -> dict:
    """What `kernelforge tune --only` writes for `groups`: every choice the other thread count, so a
    replaced choice shows."""
    flip = {g: {kc: [{**c, "threads": 384 - c["threads"]} for c in per] for kc, per in BASE["choices"][g].items()}
            for g in groups}
    return {**BASE, "created": "2027-01-01T00:00:00+00:00", "sources": {"quantize": quantize_sources},
            "choices": flip, "timings_us": {g: BASE["timings_us"][g] for g in groups}}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(QUANTIZE), min_size=1, unique=True), st.booleans())
def test_measured_groups_replace_theirs_and_no_choice_outlives_its_sources(groups, edited) -> None:
    sources = NEW_SOURCES if edited else BASE["sources"]["quantize"]
    part = _part(groups, sources)
    merged, dropped = merge_tables(BASE, part)
    validate_table(merged)
    assert {g: merged["choices"][g] for g in groups} == part["choices"]
    assert merged["sources"] == {**BASE["sources"], "quantize": sources}
    assert merged["created"] == part["created"]
    for g, per in BASE["choices"].items():
        if g in groups:
            continue
        if _op(g) == "quantize" and edited:  # measured on the kernel sources the table no longer records
            assert g not in merged["choices"] and g in dropped
        else:
            assert merged["choices"][g] == per and g not in dropped
    assert set(merged["timings_us"]) == set(merged["choices"])
    assert BASE == json.loads(COMMITTED.read_text())  # the input is not changed


def test_a_whole_op_measured_again_drops_nothing() -> None:
    merged, dropped = merge_tables(BASE, _part(QUANTIZE, NEW_SOURCES))
    assert dropped == [] and set(merged["choices"]) == set(BASE["choices"])


def test_an_op_left_without_groups_leaves_the_sources() -> None:
    """A table that only named the edited op keeps no sources entry for it once its groups are out."""
    base = {**BASE, "choices": {g: BASE["choices"][g] for g in QUANTIZE}, "sources": {"quantize": "0" * 64},
            "timings_us": {g: BASE["timings_us"][g] for g in QUANTIZE}}
    part = {**_part(QUANTIZE[:1], NEW_SOURCES), "sources": {"quantize": NEW_SOURCES}}
    merged, dropped = merge_tables(base, part)
    assert list(merged["choices"]) == QUANTIZE[:1] and dropped == QUANTIZE[1:]
    assert merged["sources"] == {"quantize": NEW_SOURCES}


@pytest.mark.parametrize("field", ["device", "arch"])
def test_a_table_of_another_card_or_arch_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: the table to update is for "):
        merge_tables({**BASE, field: "other"}, _part(QUANTIZE[:1], NEW_SOURCES))


def test_bad_update_arguments_get_one_line_and_exit_2(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    not_a_table = tmp_path / "table.json"
    not_a_table.write_text(json.dumps({"schema": 1, "device": "x"}))
    runs = {
        "missing": ["--update", str(tmp_path / "missing.json")],
        "garbage": ["--update", str(garbage)],
        "not a table": ["--update", str(not_a_table)],
        "with --import": ["--update", str(COMMITTED), "--import", str(COMMITTED)],
    }
    for why, args in runs.items():
        res = CliRunner().invoke(app, ["tune", "--cache", str(tmp_path / "cache"), *args])
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: --update: "), (why, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), why


def test_a_table_of_another_card_is_refused_before_anything_is_measured(tmp_path: Path, monkeypatch) -> None:
    """The GPU's name is known before the run: `--update` with another card's table stops there
    (one line, exit 2), not after minutes of measuring."""
    import torch

    import kernelforge.tuner.measure as measure

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")

    def never(*args, **kwargs):
        raise AssertionError("measured although the table is another card's")

    monkeypatch.setattr(measure, "tune", never)
    res = CliRunner().invoke(app, ["tune", "--cache", str(tmp_path / "cache"), "--only", "quantize|*",
                                   "--update", str(COMMITTED)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0] == (f"error: --update: {COMMITTED}: device: the table to update is for "
                        f"'NVIDIA H100 80GB HBM3', this run measures 'NVIDIA H200'")


STAGING_SOURCES = {"quantize_columnwise": "c" * 64, "scale_layout": "d" * 64}


def _staging_part(rule: dict, sources: dict = STAGING_SOURCES) -> dict:
    """What `kernelforge tune --only 'quantize_columnwise|*' --update` measures: a staging rule, no choices."""
    return {**BASE, "created": "2027-01-02T00:00:00+00:00", "sources": dict(sources), "choices": {}, "timings_us": {},
            "staging": {"min_elements": rule, "timings_us": {}}}


def test_a_staging_rule_is_merged_and_kept_by_later_partial_runs() -> None:
    merged, dropped = merge_tables(BASE, _staging_part({"nvfp4.dual": None, "mxfp8.dual": 1 << 24}))
    validate_table(merged)
    assert dropped == [] and merged["choices"] == BASE["choices"]
    assert merged["staging"]["min_elements"] == {"nvfp4.dual": None, "mxfp8.dual": 1 << 24}
    assert merged["sources"] == {**BASE["sources"], **STAGING_SOURCES}
    # a later run of the quantize groups keeps the rule and the sources it rests on
    again, _ = merge_tables(merged, _part(QUANTIZE[:2], BASE["sources"]["quantize"]))
    validate_table(again)
    assert again["staging"] == merged["staging"] and again["sources"] == merged["sources"]
    # pairs measured again replace theirs, the others are kept (same kernel sources)
    again, _ = merge_tables(merged, _staging_part({"nvfp4.dual": 1 << 26, "mxfp4.columnwise": 1 << 23}))
    validate_table(again)
    assert again["staging"]["min_elements"] == {"nvfp4.dual": 1 << 26, "mxfp8.dual": 1 << 24,
                                                "mxfp4.columnwise": 1 << 23}
    # a rule measured on another layout pass replaces the earlier one whole: its pairs rest on stale sources
    newer, _ = merge_tables(again, _staging_part({"mxfp4.columnwise": 1 << 23}, {**STAGING_SOURCES,
                                                                                "scale_layout": "e" * 64}))
    validate_table(newer)
    assert newer["staging"]["min_elements"] == {"mxfp4.columnwise": 1 << 23}
    assert newer["sources"]["scale_layout"] == "e" * 64


def test_the_merged_table_names_a_toolchain_only_when_it_had_one() -> None:
    """A run that timed no build of a known toolchain (a staging rule alone) keeps base's; a run on
    another toolchain leaves the merged table without one; both stay valid tables."""
    part = _staging_part({"nvfp4.dual": None})
    part.pop("toolchain_id")
    merged, _ = merge_tables(BASE, part)
    validate_table(merged)
    assert merged["toolchain_id"] == BASE["toolchain_id"]
    other = {**_part(QUANTIZE[:1], BASE["sources"]["quantize"]), "toolchain_id": "0" * 64}
    merged, _ = merge_tables(BASE, other)
    validate_table(merged)
    assert "toolchain_id" not in merged
