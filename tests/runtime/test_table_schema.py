"""A tuning table can never stop an op: its schema (kernelforge/cache/read/table_schema.py) is checked
where a table is imported (refused in one line naming the file and the key path), by `cache verify`
(a problem) and `cache repair` (quarantined), and where the runtime reads it (skipped with one
RuntimeWarning; the heuristic serves). Real tables on disk, the real dispatch code (no GPU: module
files are dummies and `load_function` is replaced, as in test_tuning.py)."""
from __future__ import annotations

import copy
import hashlib
import json
import warnings

import pytest

from kernelforge.build.tables import import_table, table_key
from kernelforge.cache import CacheStore
from kernelforge.cache.maintenance.verification import BAD_TABLE, verify
from kernelforge.cache.read.table_schema import TableSchemaError, validate_table
from kernelforge.runtime import dispatch
from kernelforge.sources import source_hash
from tests.runtime.test_tuning import COORDS, GROUP, H100, _table
from tests.runtime.test_tuning import cache as cache  # noqa: F401  (the fixture: a fake cache of 4 builds)

GOOD = {GROUP: {"h8k": [{"elements": 64, "ctas_per_row": 1}] * 3}}


def _bad_tables() -> list[tuple[str, dict, str]]:
    """(id, table, the start of the error naming the key path) for each way a table can be wrong."""
    good = _table(GOOD)
    out = []

    def case(name: str, expect: str, **change) -> None:
        t = copy.deepcopy(good)
        for key, value in change.items():
            if value is _MISSING:
                t.pop(key)
            else:
                t[key] = value
        out.append((name, t, expect))

    case("choices-a-list", "choices: expected an object, found a list", choices=[1, 2])
    case("group-a-list", f'choices["{GROUP}"]: expected an object, found a list', choices={GROUP: [1, 2]})
    case("buckets-an-object", f'choices["{GROUP}"]["h8k"]: expected a list', choices={GROUP: {"h8k": {"a": 1}}})
    case("bucket-a-list", f'choices["{GROUP}"]["h8k"][1]: expected an object, found a list',
         choices={GROUP: {"h8k": [{"elements": 64}, [64], None]}})
    case("value-an-object", f'choices["{GROUP}"]["h8k"][0]["elements"]: expected a string, number or boolean',
         choices={GROUP: {"h8k": [{"elements": {"n": 64}}]}})
    case("axis-empty", f'choices["{GROUP}"]["h8k"][1]: expected an object with non-empty string keys',
         choices={GROUP: {"h8k": [{"elements": 64}, {"": 64, "elements": [64]}]}})
    case("second-class-value", f'choices["{GROUP}"]["h4k"][2]["elements"]: expected a string, number or boolean',
         choices={GROUP: {"h8k": [{"elements": 64}] * 3, "h4k": [None, {"elements": 64}, {"elements": None}]}})
    case("too-many-buckets", f'choices["{GROUP}"]["h8k"]: expected a list of at most 3',
         choices={GROUP: {"h8k": [{"elements": 64}] * 4}})
    case("group-not-a-group", 'choices["rmsnorm"]: expected a dispatch group key', choices={"rmsnorm": {}})
    case("device-a-number", "device: expected a non-empty string, found 12345 (a number)", device=12345)
    case("created-missing", "created: missing", created=_MISSING)
    case("sources-a-list", "sources: expected an object, found a list", sources=["x"])
    case("arch-a-path", "arch: expected a non-empty string of letters", arch="../sm_90a")
    case("schema-2", "schema: expected 1", schema=2)
    case("m-buckets", "m_buckets: expected [256, 4096]", m_buckets=[128])
    out.append(("not-an-object", [good], "the table: expected a JSON object, found a list"))
    staged_sources = {**good["sources"], "quantize_columnwise": "a" * 64, "scale_layout": "b" * 64}
    case("staging-a-list", "staging: expected an object, found a list", staging=[1], sources=staged_sources)
    case("staging-without-rule", 'staging["min_elements"]: missing', staging={}, sources=staged_sources)
    case("staging-bad-pair", 'staging["min_elements"]["nvfp4.rowwise"]: expected a key of the form',
         staging={"min_elements": {"nvfp4.rowwise": 1}}, sources=staged_sources)
    case("staging-negative", 'staging["min_elements"]["nvfp4.dual"]: expected an integer >= 0',
         staging={"min_elements": {"nvfp4.dual": -1}}, sources=staged_sources)
    case("staging-bool", 'staging["min_elements"]["mxfp8.dual"]: expected an integer >= 0 (elements) or null '
         '(never staged), found true (a boolean)', staging={"min_elements": {"mxfp8.dual": True}}, sources=staged_sources)
    case("staging-without-its-sources", "sources: missing quantize_columnwise, scale_layout",
         staging={"min_elements": {"mxfp8.dual": 1 << 24}})
    return out


_MISSING = object()
BAD = _bad_tables()


def test_the_committed_tables_follow_the_schema():
    from kernelforge.config import data_dir

    tables = sorted((data_dir() / "tuning").glob("*.json"))
    assert tables
    for path in tables:
        validate_table(json.loads(path.read_text()))


@pytest.mark.parametrize("name,table,expect", BAD, ids=[b[0] for b in BAD])
def test_schema_names_the_wrong_key_path(name, table, expect):
    with pytest.raises(TableSchemaError) as info:
        validate_table(table)
    assert str(info.value).startswith(expect), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name,table,expect", BAD, ids=[b[0] for b in BAD])
def test_import_refuses_a_bad_table_in_one_line(tmp_path, name, table, expect):
    store = CacheStore(tmp_path / "cache")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(table))
    with pytest.raises(ValueError) as info:
        import_table(store, path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a kernelforge tuning table ({expect}"), message
    assert "\n" not in message
    assert not store.layout.index.exists(), "a refused table wrote the cache"


def test_tune_import_cli_refuses_with_one_line(tmp_path):
    from typer.testing import CliRunner

    from kernelforge.cli import app

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_table([1, 2])))  # choices is a list
    res = CliRunner().invoke(app, ["tune", "--cache", str(tmp_path / "c"), "--import", str(path)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert lines == [f"error: {path}: not a kernelforge tuning table (choices: expected an object, found a list)"]
    assert not isinstance(res.exception, AttributeError)


def _plant(store: CacheStore, table) -> str:
    """Publish `table` as a tuning-table entry whatever it holds (what a table copied from elsewhere,
    or written by another kernelforge, looks like in a cache): checksums and meta.json agree with it."""
    axes = table if isinstance(table, dict) else {}
    key = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()
    staging = store.staging_dir()
    (staging / "table.json").write_text(json.dumps(table))
    store.publish(key, staging, kind="tuning", op="tuning", name="tuning.planted.sm_90a",
                  variant={"axes": {"device": H100, "arch": "sm_90a", "measured": "2030-01-01T00:00:00+00:00",
                                    "sources": {"rmsnorm_quantize": source_hash("rmsnorm_quantize")}},
                           "kclass": {}},
                  arch=str(axes.get("arch", "sm_90a")), toolchain_id="", toolchain={}, source_hash="",
                  main_file="table.json", build_time_s=0.0)
    return key


def _resolve(table: dispatch.DispatchTable, h: int, m: int) -> str:
    fn, _ = table.resolve("rmsnorm_quantize", COORDS, (9, 0), h, 16, 256, 2 * h, m, H100)
    return fn.rsplit(".", 1)[1]


@pytest.mark.parametrize("name,bad,expect", BAD, ids=[b[0] for b in BAD])
def test_a_bad_table_in_the_cache_never_stops_an_op(cache, name, bad, expect):  # noqa: F811
    # A valid older table says e64 for H = 8192, M <= 256; the heuristic says e32. The bad table is
    # the newest: it is skipped (one warning), the older valid table still serves.
    from kernelforge.build.tables import publish_table

    publish_table(cache, _table(GOOD))
    _plant(cache, bad)
    table = dispatch.DispatchTable(cache.root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [_resolve(table, 8192, 100) for _ in range(3)] == ["e64c1"] * 3
        assert _resolve(table, 16384, 100) == "e64c1"  # heuristic (no table covers h32k)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "ignoring tuning table tuning.planted.sm_90a" in msgs[0], msgs


def test_only_a_bad_table_the_heuristic_serves(cache):  # noqa: F811
    _plant(cache, _table([1, 2]))
    table = dispatch.DispatchTable(cache.root)
    with pytest.warns(RuntimeWarning, match="choices: expected an object, found a list"):
        assert _resolve(table, 8192, 100) == "e32c1" and _resolve(table, 16384, 100) == "e64c1"


def test_verify_reports_a_bad_table_and_repair_quarantines_it(cache):  # noqa: F811
    from typer.testing import CliRunner

    from kernelforge.cache.maintenance.repair import repair
    from kernelforge.cli import app

    key = _plant(cache, _table({GROUP: [1, 2]}))
    report = verify(cache)
    bad = [p for p in report.problems if p.problem == BAD_TABLE]
    assert [p.key for p in bad] == [key] and len(report.problems) == 1, [str(p) for p in report.problems]
    assert bad[0].detail == f'choices["{GROUP}"]: expected an object, found a list'
    res = CliRunner().invoke(app, ["cache", "verify", "--cache", str(cache.root)])
    assert res.exit_code == 1 and "not a valid tuning table table.json" in res.output, res.output
    done = repair(cache)
    assert [q[0] for q in done.quarantined] == ["tuning.planted.sm_90a"]
    assert verify(cache).ok
    assert key not in cache.index(fresh=True)


def test_publish_refuses_a_bad_table(cache):  # noqa: F811
    from kernelforge.build.tables import publish_table

    with pytest.raises(ValueError, match="^device: expected a non-empty string"):
        publish_table(cache, {**_table(GOOD), "device": 12345})
    assert table_key(_table(GOOD)) not in cache.index(fresh=True)
