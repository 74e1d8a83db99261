"""A partial tuning run merged into a card's earlier table (`kernelforge tune --only ... --update`).

After one family's kernel changes, only its dispatch groups need measuring again; the card's
other choices still hold, because the runtime reads an op's choices only from a table that
records that op's kernel sources (`kernelforge.runtime.tuning`)."""
from __future__ import annotations

import copy
from typing import Any

from ..cache.read.table_schema import STAGING_OPS


def merge_tables(base: dict[str, Any], part: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`base` with every dispatch group `part` measured replaced by part's, and the pairs of part's
    staging rule (`kernelforge.tuner.staging`) replacing base's; return the merged table and the
    groups of `base` it left out.

    Both are valid tables (`validate_table`) of one device and arch, else ValueError naming the
    field. A group of `base` that `part` did not measure is left out when `part` measured its op
    on other kernel sources: the merged table records part's sources for that op, and base's
    choices were not measured on them. The merged table is dated by `part`'s measurement.
    """
    for field in ("device", "arch"):
        if base[field] != part[field]:
            raise ValueError(f"{field}: the table to update is for {base[field]!r}, this run measured {part[field]!r}")
    merged = copy.deepcopy(base)
    measured_ops = set(part["sources"])
    changed = {op for op in measured_ops if base["sources"].get(op) != part["sources"][op]}
    dropped = sorted(g for g in base["choices"] if g not in part["choices"] and g.split("|", 1)[0] in changed)
    for group in dropped:
        merged["choices"].pop(group)
        merged.get("timings_us", {}).pop(group, None)
    merged["choices"].update(copy.deepcopy(part["choices"]))
    merged.setdefault("timings_us", {}).update(copy.deepcopy(part.get("timings_us", {})))
    merged["sources"].update(part["sources"])
    if "staging" in part:
        merged["staging"] = _merged_staging(base, part)
    kept_ops = {g.split("|", 1)[0] for g in merged["choices"]}
    if "staging" in merged:
        kept_ops.update(STAGING_OPS)
    merged["sources"] = {op: h for op, h in merged["sources"].items() if op in kept_ops}
    merged["created"] = part["created"]
    if "toolchain_id" in part and merged.get("toolchain_id") != part["toolchain_id"]:
        merged.pop("toolchain_id", None)  # measured on builds of more than one toolchain: none to name
    return merged, dropped


def _merged_staging(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """part's staging rule with the pairs of base's that part did not measure, when both were
    measured on the same kernel sources of the ops a rule rests on (else part's alone)."""
    staging = copy.deepcopy(part["staging"])
    old = base.get("staging")
    if old is None or any(base["sources"].get(op) != part["sources"].get(op) for op in STAGING_OPS):
        return staging
    for section in ("min_elements", "timings_us"):
        kept = {k: copy.deepcopy(v) for k, v in old.get(section, {}).items() if k not in staging.get(section, {})}
        if kept:
            staging[section] = {**kept, **staging.get(section, {})}
    return staging
