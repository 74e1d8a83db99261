"""Tuning tables: the runtime's choice among a K-class's builds, and the heuristic without one.

Runs on the CPU over a fake cache whose index was written by CacheStore.publish; module files
are dummies and `load_function` is replaced, so what is checked is which build is chosen.
"""
from __future__ import annotations

import hashlib
import json
import warnings

import pytest

from kernelforge.build.tables import publish_table
from kernelforge.cache import CacheStore
from kernelforge.runtime import dispatch, layer_reader
from kernelforge.runtime.tuning import M_BUCKETS, SCHEMA, TuningTable, heuristic_rank, m_bucket
from kernelforge.sources import source_hash

COORDS = {"format": "nvfp4", "scale_mode": "none", "layout": "swizzled", "dtype": "bfloat16", "residual": "none"}
GROUP = "rmsnorm_quantize|dtype=bfloat16,format=nvfp4,layout=swizzled,residual=none,scale_mode=none"
H100 = "NVIDIA H100 80GB HBM3"


def _meta(kclass: str, max_k: int, elements: int, src: str, ctas: int = 1) -> dict:
    name = f"rmsnorm_quantize.nvfp4.none.swizzled.bfloat16.none.{kclass}.sm_90a.e{elements}c{ctas}"
    axes = {**COORDS, "kclass": kclass, "arch": "sm_90a", "elements": elements, "ctas_per_row": ctas}
    return dict(kind="kernel", op="rmsnorm_quantize", name=name,
                variant={"axes": dict(sorted(axes.items())), "op": "rmsnorm_quantize",
                         "kclass": {"k_multiple_blocks": 1, "name": kclass, "vector_bytes": 16, "max_k": max_k}},
                arch="sm_90a", toolchain_id="tc", toolchain={}, source_hash=src, main_file="module.so",
                build_time_s=0.0, extra={"symbol": "kf_" + name.replace(".", "_"), "runtime_key": "rt" * 32,
                                         "dispatch": dict(COORDS)})


def _publish(store: CacheStore, key: str, payload: bytes, **meta) -> None:
    staging = store.staging_dir()
    (staging / meta["main_file"]).write_bytes(payload)
    store.publish(key, staging, **meta)


def _table(choices: dict, *, device: str = H100, sources: dict | None = None) -> dict:
    return {"schema": SCHEMA, "device": device, "arch": "sm_90a", "created": "2026-11-22T00:00:00+00:00",
            "m_buckets": list(M_BUCKETS), "sources": sources or {"rmsnorm_quantize": source_hash("rmsnorm_quantize")},
            "choices": choices, "toolchain_id": "tc"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    store = CacheStore(tmp_path / "cache")
    src = source_hash("rmsnorm_quantize")
    for kclass, max_k, ctas in (("h8k", 8192, (1,)), ("h32k", 32768, (1, 2))):  # as the spec: clusters at h32k
        for e in (32, 64):
            for c in ctas:
                meta = _meta(kclass, max_k, e, src, c)
                _publish(store, hashlib.sha256(meta["name"].encode()).hexdigest(), meta["name"].encode(), **meta)
    _publish(store, "rt" * 32, b"runtime", kind="runtime", op="runtime", name="runtime-x", variant={}, arch="host",
             toolchain_id="tc", toolchain={}, source_hash="", main_file="libkfrt-x.so", build_time_s=0.0)
    monkeypatch.setattr(layer_reader, "load_function", lambda trusted, entry, runtime: entry["name"])
    return store


def _chosen(store: CacheStore, h: int, m: int, device: str = H100) -> str:
    fn, _ = dispatch.DispatchTable(store.root).resolve("rmsnorm_quantize", COORDS, (9, 0), h, 16, 256, 2 * h, m,
                                                      device)
    return fn.rsplit(".", 1)[1]


def _damage(store: CacheStore, entry, old: str, new: str) -> None:
    """Rewrite a published table's file in place (its recorded sha256 no longer matches)."""
    path = store.entry_dir(entry) / entry.main_file
    path.chmod(0o644)
    path.write_text(path.read_text().replace(old, new))


@pytest.fixture
def table_reads(monkeypatch) -> list[dict]:
    """The tuning-table entries the runtime reads and verifies, in order."""
    reads: list[dict] = []
    real = layer_reader.read_verified_json

    def counted(trusted, entry):
        reads.append(entry)
        return real(trusted, entry)

    monkeypatch.setattr(layer_reader, "read_verified_json", counted)
    return reads


def test_m_buckets():
    assert [m_bucket(m) for m in (1, 256, 257, 4096, 4097, 10**6)] == [0, 0, 1, 1, 2, 2]


def test_heuristic_without_a_table(cache):
    # Documented heuristic: 32 elements per thread up to H = 8192, 64 above; quantize: 128 threads.
    assert _chosen(cache, 4096, 128) == "e32c1" and _chosen(cache, 16384, 128) == "e64c1"
    assert heuristic_rank("quantize", 0, {"threads": 128, "units_per_thread": 1}) < \
        heuristic_rank("quantize", 0, {"threads": 256, "units_per_thread": 1})


def test_table_choice_per_bucket_and_device(cache):
    publish_table(cache, _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}, {"elements": 32, "ctas_per_row": 1}, {"elements": 64, "ctas_per_row": 1}]}}))
    assert [_chosen(cache, 8192, m) for m in (100, 2048, 65536)] == ["e64c1", "e32c1", "e64c1"]
    assert _chosen(cache, 32768, 100) == "e64c1"  # K-class not in the table: heuristic
    assert _chosen(cache, 8192, 100, device="NVIDIA H200") == "e32c1"  # another device: heuristic


def test_ctas_per_row_one_row_one_cta_unless_the_table_says_cluster(cache):
    # h32k builds both one CTA per row and 2-CTA clusters: the heuristic takes one CTA (faster on
    # both Hopper cards at M >= 4096, docs/performance.md), a table's cluster choice is honoured
    # per bucket, and a choice naming an unbuilt cluster size falls back to the heuristic.
    assert [_chosen(cache, 32768, m) for m in (100, 2048, 65536)] == ["e64c1"] * 3
    publish_table(cache, _table({GROUP: {"h32k": [{"elements": 32, "ctas_per_row": 2},
                                                  {"elements": 64, "ctas_per_row": 1},
                                                  {"elements": 64, "ctas_per_row": 4}]}}))
    assert [_chosen(cache, 32768, m) for m in (100, 2048, 65536)] == ["e32c2", "e64c1", "e64c1"]
    assert heuristic_rank("rmsnorm_quantize", 32768, {"elements": 64, "ctas_per_row": 1}) < \
        heuristic_rank("rmsnorm_quantize", 32768, {"elements": 64, "ctas_per_row": 2})


def test_newest_table_of_the_device_wins_and_stale_sources_are_ignored(cache):
    old = _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}})
    publish_table(cache, old)
    new = dict(_table({GROUP: {"h8k": [{"elements": 32, "ctas_per_row": 1}, {"elements": 64, "ctas_per_row": 1}, {"elements": 64, "ctas_per_row": 1}]}}),
               created="2026-11-23T00:00:00+00:00")
    publish_table(cache, new)
    assert _chosen(cache, 8192, 100) == "e32c1" and _chosen(cache, 8192, 2048) == "e64c1"
    # A newer partial table (another K-class only, as `tune --only` writes) does not hide the
    # older table's choice for this one.
    partial = dict(_table({GROUP: {"h32k": [{"elements": 32, "ctas_per_row": 1}] * 3}}), created="2026-11-23T12:00:00+00:00")
    publish_table(cache, partial)
    assert _chosen(cache, 8192, 100) == "e32c1" and _chosen(cache, 8192, 2048) == "e64c1"
    assert _chosen(cache, 32768, 100) == "e32c1"  # the partial table's own choice (heuristic says e64c1)
    stale = dict(_table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}, sources={"rmsnorm_quantize": "0" * 64}),
                 created="2026-11-24T00:00:00+00:00")
    publish_table(cache, stale)
    assert _chosen(cache, 8192, 100) == "e32c1"  # measured on other kernel sources: heuristic


def test_corrupt_table_is_refused_with_a_warning(cache):
    publish_table(cache, _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}))
    _damage(cache, next(e for e in cache.iter_entries() if e.kind == "tuning"), '"elements":64', '"elements":32')
    with pytest.warns(RuntimeWarning, match="tuning table"):
        assert _chosen(cache, 8192, 100) == "e32c1"


def test_table_entries_are_listed_verified_and_survive_clean_stale(cache, tmp_path):
    from typer.testing import CliRunner

    from kernelforge.cache.maintenance.cleaning import clean
    from kernelforge.cache.maintenance.verification import verify
    from kernelforge.cli import app

    path = tmp_path / "h100.json"
    path.write_text(json.dumps(_table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}})))
    res = CliRunner().invoke(app, ["tune", "--cache", str(cache.root), "--import", str(path)])
    assert res.exit_code == 0, res.output
    kinds = [e.kind for e in cache.iter_entries()]
    assert kinds.count("tuning") == 1 and verify(cache).ok
    assert "tuning.nvidia_h100_80gb_hbm3.sm_90a" in CliRunner().invoke(app, ["cache", "ls", "--cache", str(cache.root)]).output
    clean(cache, keep_toolchain_id="another", keep_source_hashes={""})
    assert [e.kind for e in cache.iter_entries()] == ["tuning"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": SCHEMA, "device": "x"}))
    res = CliRunner().invoke(app, ["tune", "--cache", str(cache.root), "--import", str(bad)])
    assert res.exit_code != 0 and "not a kernelforge tuning table" in res.output


def test_table_schema_is_checked():
    with pytest.raises(ValueError, match="^m_buckets: expected"):
        TuningTable({**_table({}), "m_buckets": [1, 2, 3]})
    with pytest.raises(ValueError, match="^device: missing"):
        TuningTable({"schema": SCHEMA, "m_buckets": list(M_BUCKETS)})


def test_committed_tables_are_valid_and_name_built_candidates():
    from kernelforge.config import tuning_dir
    from kernelforge.spec import load_specs
    from kernelforge.spec.files import resolve_spec_paths

    tables = sorted(tuning_dir().glob("*.json"))
    assert tables, "no committed tuning table under kernelforge/data/tuning/"
    variants = load_specs(resolve_spec_paths(None))
    built = {(v.op, frozenset((k, str(x)) for k, x in v.coords)) for v in variants}
    for path in tables:
        t = TuningTable(json.loads(path.read_text()))
        assert t.choices, path.name
        assert t.sources == {op: source_hash(op) for op in t.sources}, (
            f"{path.name} was measured on other kernel sources: re-run `kernelforge tune --export` on that GPU")
        for group, per_class in t.choices.items():
            op, coords = group.split("|", 1)
            dispatch_coords = dict(kv.split("=") for kv in coords.split(","))
            for kclass, buckets in per_class.items():
                assert len(buckets) == len(M_BUCKETS) + 1
                for values in buckets:
                    full = frozenset((k, str(x)) for k, x in {**dispatch_coords, "kclass": kclass, "arch": t.arch,
                                                            **values}.items())
                    assert (op, full) in built, (path.name, group, kclass, values)


def test_a_table_file_is_read_and_verified_once_for_every_op(cache, table_reads):
    """A table covering two ops is parsed once per process (its file re-hashed on that read only);
    each op still reads only the choices of its own sources."""
    sources = {"rmsnorm_quantize": source_hash("rmsnorm_quantize"), "quantize": source_hash("quantize")}
    publish_table(cache, _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}, sources=sources))
    table = dispatch.DispatchTable(cache.root)
    assert _chosen_in(table, 8192, 100) == "e64c1"
    for op in ("quantize", "rmsnorm_quantize", "quantize"):
        assert len(list(table.tuning_tables(H100, "sm_90a", op))) == 1
    reads = [e["name"] for e in table_reads]
    assert len(reads) == 1, reads
    assert list(table.tuning_tables(H100, "sm_90a", "quantize_grouped")) == []  # not measured on its sources


def _chosen_in(table: dispatch.DispatchTable, h: int, m: int) -> str:
    fn, _ = table.resolve("rmsnorm_quantize", COORDS, (9, 0), h, 16, 256, 2 * h, m, H100)
    return fn.rsplit(".", 1)[1]


def test_an_older_table_is_read_only_for_calls_the_newer_does_not_cover(cache, table_reads):
    # A fresh process's first call reads only the newest table of its card; an older one (kept
    # for the cells a partial re-tune does not cover) is read when a call needs it. Its file is
    # damaged here, so reading it is seen as the one warning, and a choice it no longer gives.
    old = _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3,
                          "h32k": [{"elements": 32, "ctas_per_row": 2}] * 3}})
    publish_table(cache, old)
    new = dict(_table({GROUP: {"h8k": [{"elements": 32, "ctas_per_row": 1}] * 3}}),
               created="2026-11-23T00:00:00+00:00")
    publish_table(cache, new)
    older = next(e for e in cache.iter_entries() if e.kind == "tuning" and "h32k" in
                 (cache.entry_dir(e) / e.main_file).read_text())
    _damage(cache, older, '"elements":32', '"elements":64')
    table = dispatch.DispatchTable(cache.root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the damaged older table is never touched
        assert [_chosen_in(table, 8192, m) for m in (100, 2048, 65536)] == ["e32c1"] * 3
    reads = [e["key"] for e in table_reads]
    assert len(reads) == 1 and reads[0] != older.key, reads
    with pytest.warns(RuntimeWarning, match="ignoring tuning table"):
        assert _chosen_in(table, 32768, 100) == "e64c1"  # needs the older table: damaged, heuristic
    reads = [e["key"] for e in table_reads]
    assert len(reads) == 2 and reads[1] == older.key, reads


def test_a_damaged_table_warns_once_for_every_op(cache):
    sources = {"rmsnorm_quantize": source_hash("rmsnorm_quantize"), "quantize": source_hash("quantize")}
    publish_table(cache, _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}, sources=sources))
    _damage(cache, next(e for e in cache.iter_entries() if e.kind == "tuning"), '"elements":64', '"elements":32')
    table = dispatch.DispatchTable(cache.root)
    with pytest.warns(RuntimeWarning, match="tuning table") as caught:
        assert list(table.tuning_tables(H100, "sm_90a", "rmsnorm_quantize")) == []
        assert list(table.tuning_tables(H100, "sm_90a", "quantize")) == []
    assert len([w for w in caught if "tuning table" in str(w.message)]) == 1


def test_tuner_keeps_the_heuristic_pick_unless_another_is_measurably_faster():
    import random

    from kernelforge.tuner.measure import MIN_GAIN, pick

    rng = random.Random()
    for _ in range(200):
        n = rng.randint(2, 5)
        us = [rng.uniform(1.0, 100.0) for _ in range(n)]
        default = rng.randrange(n)
        best = min(range(n), key=us.__getitem__)
        within = us[default] <= us[best] * (1 + MIN_GAIN)
        assert pick(us, default) == (default if within else best)
    # at the edges: a tie or a gain below MIN_GAIN keeps the heuristic's pick, a larger gain replaces it
    assert pick([9.8, 9.8], 1) == 1
    assert pick([10.0, 10.0 * (1 + MIN_GAIN / 2)], 1) == 1
    assert pick([10.0, 10.0 * (1 + 2 * MIN_GAIN)], 1) == 0


def test_candidate_pools_are_what_tune_times(cache):
    """`tune` and `benchmarks/tuning_samples.py` time the same pools: each K-class's builds of a
    dispatch group that runs here, with the class's sample K values and the heuristic's pick."""
    from kernelforge.tuner.measure import candidate_pools, describe

    table = dispatch.DispatchTable(cache.root)
    pools = {p.kclass: p for p in candidate_pools(table, "rmsnorm_quantize|*", (9, 0))}
    assert set(pools) == {"h8k", "h32k"}
    h32k = pools["h32k"]
    assert h32k.group == GROUP and h32k.op == "rmsnorm_quantize" and h32k.arch == "sm_90a"
    assert sorted((v["elements"], v["ctas_per_row"]) for v in h32k.values) == [(32, 1), (32, 2), (64, 1), (64, 2)]
    assert [c.entry["name"] for c in h32k.cands] == [c.entry["name"] for c in table.groups()[GROUP] if c.kclass.name == "h32k"]
    assert h32k.ks == [32768, 24576] and pools["h8k"].ks == [8192, 6144]
    # The heuristic's pick: 64 elements above H = 8192, 32 up to it, one CTA per row.
    assert h32k.values[h32k.default] == {"elements": 64, "ctas_per_row": 1}
    assert pools["h8k"].values[pools["h8k"].default] == {"elements": 32, "ctas_per_row": 1}
    assert h32k.coords == COORDS
    # The line `tune` logs for a pool timed at one M (and tuning_samples.py writes).
    assert describe(pools["h8k"], 2048, [1.26, 3.0]) == (
        f"{GROUP} h8k M=2048 K=8192+6144: " + ", ".join(
            f"{json.dumps(v, sort_keys=True)} {t} us" for v, t in zip(pools["h8k"].values, ("1.3", "3.0"))))
    assert not list(candidate_pools(table, "quantize|*", (9, 0)))  # no group of that op here
    assert not list(candidate_pools(table, "*", (8, 0)))  # sm_90a builds do not run on sm_80


STAGING_SOURCES = {op: source_hash(op) for op in ("rmsnorm_quantize", "quantize_columnwise", "scale_layout")}


def _staging_table(rule: dict, created: str, **sources) -> dict:
    """A table with rmsnorm choices and a staging rule measured on `sources` (default: this tree's)."""
    t = _table({GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}, sources={**STAGING_SOURCES, **sources})
    return {**t, "created": created, "staging": {"min_elements": rule}}


def test_staging_rule_of_the_newest_table_measured_on_these_sources(cache):
    def rule(device: str = H100):
        return dispatch.DispatchTable(cache.root).staging_rule(device, "sm_90a")

    assert rule() is None  # no table: the shipped rule
    publish_table(cache, _staging_table({"nvfp4.dual": None, "mxfp8.dual": 1 << 24}, "2026-11-22T00:00:00+00:00"))
    assert rule() == {"nvfp4.dual": None, "mxfp8.dual": 1 << 24}
    assert rule("NVIDIA H200") is None and dispatch.DispatchTable(cache.root).staging_rule(H100, "sm_100a") is None
    # A newer table without a rule (a `tune --only 'quantize|*'` run) does not hide it ...
    publish_table(cache, dict(_table({GROUP: {"h8k": [{"elements": 32, "ctas_per_row": 1}] * 3}}),
                              created="2026-11-23T00:00:00+00:00"))
    assert rule() == {"nvfp4.dual": None, "mxfp8.dual": 1 << 24}
    # ... nor does a newer rule measured with another layout pass: it rests on stale sources
    publish_table(cache, _staging_table({"nvfp4.dual": 0}, "2026-11-24T00:00:00+00:00", scale_layout="0" * 64))
    assert rule() == {"nvfp4.dual": None, "mxfp8.dual": 1 << 24}
    publish_table(cache, _staging_table({"nvfp4.dual": 1 << 25}, "2026-11-25T00:00:00+00:00"))
    assert rule() == {"nvfp4.dual": 1 << 25}
    assert _chosen(cache, 8192, 100) == "e64c1"  # the staging tables' own rmsnorm choices still serve


def test_staging_starts_where_the_staged_path_wins_from_there_on():
    from kernelforge.tuner.measure import MIN_GAIN
    from kernelforge.tuner.staging import staged_from

    win, tie, loss = 0.9, 1 / (1 + MIN_GAIN / 2), 1.1  # staged time over direct
    sizes = [1 << 23, 1 << 24, 1 << 25, 1 << 26]

    def rows(*ratios):
        return [(n, 100.0, 100.0 * r) for n, r in zip(sizes, ratios)]

    assert staged_from(rows(loss, loss, win, win)) == 1 << 25
    assert staged_from(rows(win, loss, win, win)) == 1 << 25  # a win below a loss does not count
    assert staged_from(rows(win, win, win, win)) == 1 << 23
    assert staged_from(rows(loss, win, win, loss)) is None  # loses at the largest size: never staged
    assert staged_from(rows(win, win, win, tie)) is None  # within MIN_GAIN: the direct kernel
    assert staged_from([]) is None


def test_the_published_table_leaves_every_timing_to_its_timings_file(cache):
    """What the runtime parses on a first call holds no timings, the staging rule's included; the
    timings file beside it holds both."""
    table = _staging_table({"nvfp4.dual": None}, "2026-11-22T00:00:00+00:00")
    table["timings_us"] = {GROUP: {"h8k": [{"e64c1": 1.0}]}}
    table["staging"]["timings_us"] = {"nvfp4.dual": {"4096x4096": {"direct": 1.0, "staged": 2.0}}}
    key = publish_table(cache, table)
    entry = next(e for e in cache.iter_entries() if e.key == key)
    lean = json.loads((cache.entry_dir(entry) / "table.json").read_text())
    timings = json.loads((cache.entry_dir(entry) / "timings.json").read_text())
    assert "timings_us" not in lean and lean["staging"] == {"min_elements": {"nvfp4.dual": None}}
    assert timings == {**table["timings_us"], "staging_timings_us": table["staging"]["timings_us"]}
    assert dispatch.DispatchTable(cache.root).staging_rule(H100, "sm_90a") == {"nvfp4.dual": None}


def test_committed_staging_rules_follow_from_their_own_timings():
    """A committed table's staging rule is what `tune` derives from the timings it recorded (a
    threshold edited by hand, or timings of another run pasted beside it, fails here)."""
    from kernelforge.config import tuning_dir
    from kernelforge.tuner.staging import staged_from

    checked = 0
    for path in sorted(tuning_dir().glob("*.json")):
        staging = json.loads(path.read_text()).get("staging")
        if staging is None:
            continue
        for pair, threshold in staging["min_elements"].items():
            sizes = staging["timings_us"][pair]
            rows = sorted((int(m) * int(k), t["direct"], t["staged"])
                          for (m, k), t in ((shape.split("x"), t) for shape, t in sizes.items()))
            assert staged_from(rows) == threshold, (path.name, pair, rows)
            checked += 1
    assert checked, "no committed table has a staging rule with timings"
