"""benchmarks/host_evidence.py without a GPU: which probes a run's missed host targets get, how
`diag.py first-call` children are summarized, and that the report carries the probes' tables.
The probes themselves run on the GPU machine (`device/host_evidence.sh`)."""
from __future__ import annotations

import copy
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import host_evidence  # noqa: E402
import run  # noqa: E402
from diag import FIRST_SPLIT  # noqa: E402

RUN = json.loads((REPO / "benchmarks/results/current/h100-run.json").read_text())
STAGES = ["import kernelforge", "op families + spec schema", "runtime modules (cache, dispatch, loader)",
          "op modules + torch.library registration", "cache layers + dispatch table",
          "first quantize call (launch queued)", "synchronize", "second quantize call + sync"]


ALLOC = {"probe": "alloc", "us": {"torch.add(out=)": 6.1, "quantize, out=": 6.0, "quantize, allocating": 10.4,
                                  "the loaded kernel function alone": 3.7,
                                  "two torch.empty_like (the allocating call's outputs)": 3.3}}


def _child(rng: random.Random) -> dict:
    """A child's JSON line in the layout `diag.py first-call` prints."""
    stages = {n: rng.uniform(0.05, 15.0) for n in STAGES}
    split = {n: rng.uniform(0.1, 5.0) for n in FIRST_SPLIT}
    return {"op": "quantize", "stages_ms": stages, "first_split_ms": split,
            "first_cpu_ms": sum(list(stages.values())[:7]) * rng.uniform(0.8, 1.0), "first_usage": {}}


def test_first_call_children_are_summarized_per_stage() -> None:
    rng = random.Random()
    children = [_child(rng) for _ in range(rng.randint(3, 9))]
    row = host_evidence.first_call_summary("default layers", children)
    totals = [sum(list(c["stages_ms"].values())[:7]) for c in children]
    assert row["total_ms"] == [min(totals), statistics.median(totals), max(totals)]
    assert list(row["stages_ms"]) == STAGES[:7]  # the first call's stages only, in order
    for n in STAGES[:7]:
        assert row["stages_ms"][n] == statistics.median(c["stages_ms"][n] for c in children)
    assert row["cpu_over_wall"] == statistics.median(c["first_cpu_ms"] / t for c, t in zip(children, totals))
    assert 0.8 <= row["cpu_over_wall"] <= 1.0
    assert set(row["first_split_ms"]) == set(FIRST_SPLIT)


def test_each_missed_host_target_gets_its_probe(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(host_evidence, "first_call_rows",
                        lambda runs, cache_dir: calls.append(("first", runs, cache_dir)) or [])
    monkeypatch.setattr(host_evidence, "_in_child", lambda *a: calls.append(a) or ([ALLOC] if a == ("alloc",) else []))
    res = copy.deepcopy(RUN)
    res["hopper_targets"] = run.hopper_targets(res, table_devices={res["device"]})
    missed = {t["target"]: t["worst"] for t in res["hopper_targets"] if not t["met"]}
    eager = next(w for t, w in missed.items() if t.startswith(host_evidence.EAGER_TARGET))
    host_evidence.evidence_rows(res, "/some/cache", log=lambda _m: None)
    assert calls == [("first", host_evidence.STARTUP_RUNS, "/some/cache"), ("eager", eager), ("alloc",)]
    # a probe that fails is a row naming its error, and the report says it was not measured
    monkeypatch.setattr(host_evidence, "_in_child", lambda *a: 1 / 0)
    rows = host_evidence.evidence_rows(res, None, log=lambda _m: None)
    assert {"probe": "eager", "error": "ZeroDivisionError: division by zero"} in rows
    assert {"probe": "alloc", "error": "ZeroDivisionError: division by zero"} in rows
    assert "Not measured: the eager probe failed (ZeroDivisionError: division by zero)." in host_evidence.markdown(
        rows, "GPU")
    # past the run's time budget, the probes are skipped and say so
    calls.clear()
    monkeypatch.setattr(host_evidence, "_in_child", lambda *a: calls.append(a) or [ALLOC])
    rows = host_evidence.evidence_rows(res, None, log=lambda _m: None, deadline=0.0)
    assert calls == [] and [r["probe"] for r in rows] == ["first call", "eager", "alloc"]
    assert all(r["error"].startswith("skipped: the run was past its time budget") for r in rows)
    # every host target met: no probe runs
    calls.clear()
    for t in res["hopper_targets"]:
        t["met"] = True
    assert host_evidence.evidence_rows(res, None, log=lambda _m: None) == [] and calls == []


def test_grouped_cell_labels_parse() -> None:
    assert host_evidence.eager_case("nvfp4 G=64") == ("nvfp4", 64)
    assert host_evidence.eager_case("mxfp8 G=1024") == ("mxfp8", 1024)
    assert host_evidence.eager_case("not measured") is None


def test_the_report_carries_the_host_evidence_tables() -> None:
    rng = random.Random()
    res = copy.deepcopy(RUN)
    first = [host_evidence.first_call_summary(src, [_child(rng) for _ in range(4)])
             for src in ("default layers", "cache directory")]
    eager = [{"probe": "eager", "case": c, "host_us": 11.0, "direct_us": 8.5, "eager_us": 140.0, "graph1_us": 125.0,
              "b2b_us": 113.5, "kernel_us": [110.0]} for c in ("quantize nvfp4", "grouped nvfp4 G=64")]
    res["host_evidence"] = [*first, *eager, ALLOC]
    md = run.markdown(res, [])
    assert "### Why the missed host targets miss" in md
    lines = md.splitlines()
    total = next(x for x in lines if x.startswith("| import + first call, min / median / max |"))
    assert f"{first[0]['total_ms'][1]:.1f}" in total and f"{first[1]['total_ms'][1]:.1f}" in total
    assert any(x.startswith("| cache layers + dispatch table |") for x in lines)
    assert "| grouped nvfp4 G=64 | 11.0 | 8.5 | 140.0 | 125.0 | 113.5 | 26.5 |" in lines
    assert "| allocating minus out= | 4.40 |" in lines
    res["host_evidence"] = []
    assert "Why the missed host targets miss" not in run.markdown(res, [])
