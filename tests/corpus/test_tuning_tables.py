"""Tuning tables (kernelforge/runtime/tuning.py TuningTable, kernelforge/tuner/tables.py
import_table, table_entries_for): random JSON documents, a valid table with values replaced,
keys dropped or added, and files that are not JSON. Each either loads (and then answers every
lookup, imports into a cache that still verifies) or raises ValueError (TableSchemaError) /
the project's own errors: never AttributeError, KeyError, TypeError."""
from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kernelforge.build.tables import import_table
from kernelforge.cache import CacheStore, verify
from kernelforge.errors import KernelforgeError
from kernelforge.runtime.tuning import TuningTable, table_entries_for
from kernelforge.sources import source_hash
from tests.corpus._corpus import Hang, corpus_settings, count, problem, time_limit

TARGET = "tuning_tables"
GROUP = "quantize|dtype=bfloat16,format=mxfp8,layout=linear,scale_mode=floor"
VALID: dict[str, Any] = {
    "schema": 1, "m_buckets": [256, 4096], "device": "NVIDIA H100 80GB HBM3", "arch": "sm_90a",
    "created": "2026-11-26T12:52:29+00:00", "toolchain_id": "f" * 64, "bucket_sample_m": [128, 2048, 16384],
    "sources": {"quantize": source_hash("quantize"), "rmsnorm_quantize": source_hash("rmsnorm_quantize")},
    "choices": {GROUP: {"aligned": [{"threads": 128, "units_per_thread": 1}, None,
                                    {"threads": 256, "units_per_thread": 1}],
                        "any": [{"threads": 128, "units_per_thread": 1}] * 3},
                "rmsnorm_quantize|dtype=bfloat16,format=nvfp4,layout=linear,residual=none,scale_mode=none":
                    {"h1k": [{"elements": 32}] * 3}},
    "timings_us": {GROUP: {"aligned": [[1.0, 2.0]]}},
}

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1, 0, -1, 256, 4096, 2**63, 1e308]),
    st.text(max_size=20), st.sampled_from(["", "sm_90a", "quantize", GROUP, "aligned", "\u00e9\u4e2d", "a|b", "|"]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(list(VALID) + ["aligned", "quantize", GROUP])),
                    inner, max_size=4)), max_leaves=12)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_tables(draw) -> Any:
    """VALID with 1-3 edits: a value replaced by any JSON value, a key dropped, a key added."""
    doc = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(json_values)
            continue
        parent = doc
        try:
            for p in path[:-1]:
                parent = parent[p]
        except (KeyError, IndexError, TypeError):
            continue
        op = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if op == "replace" or (op == "drop" and isinstance(parent, list)):
            parent[path[-1]] = draw(json_values)
        elif op == "drop":
            parent.pop(path[-1], None)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values)
    return doc


def _lookups(table: TuningTable) -> None:
    """Every lookup the runtime may make of a loaded table."""
    for op in ("quantize", "rmsnorm_quantize", "quantize_grouped"):
        for group, per_class in list(table.choices.items()) + [(GROUP, {"aligned": None})]:
            for kclass in list(per_class) + ["nope"]:
                for bucket in range(4):
                    got = table.choice(op, group, kclass, bucket)
                    assert got is None or isinstance(got, dict), got


def check_table(doc: Any, raw: bytes | None = None) -> None:
    """`doc` as a table object, and as a file (its JSON, or `raw` bytes) imported into a cache."""
    given_ = repr(raw[:200]) if raw is not None else json.dumps(doc)[:400]
    tmp = Path(tempfile.mkdtemp(prefix="kf-corpus-tuning-"))
    t0 = time.monotonic()
    outcome = []
    try:
        with time_limit(20):
            if raw is None:
                try:
                    _lookups(TuningTable(doc))
                    outcome.append("loaded")
                    # the index entry publish_table makes of it, as the runtime selects tables
                    axes = {"device": doc["device"], "arch": doc["arch"], "measured": doc["created"],
                            "sources": doc["sources"]}
                    table_entries_for([{"key": "k", "created": "", "variant": {"axes": axes}}], doc["device"],
                                      doc["arch"], "quantize")
                except ValueError:  # TableSchemaError
                    outcome.append("ValueError")
            path = tmp / "table.json"
            path.write_bytes(raw if raw is not None else json.dumps(doc).encode())
            store = CacheStore(tmp / "cache")
            try:
                import_table(store, path)
                report = verify(store)
                assert report.ok, problem(TARGET, "bad output", given_,
                                          f"an imported table fails cache verify: {report.problems[:2]}")
                outcome.append("imported")
            except (ValueError, KernelforgeError) as exc:
                assert str(exc), problem(TARGET, "wrong error", given_, f"{type(exc).__name__} without a message")
                outcome.append("refused")
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(exc).__name__}: {exc}")) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    count(TARGET, "/".join(outcome), time.monotonic() - t0)


@corpus_settings(max_examples=80, deadline_s=20)
@given(json_values)
def test_random_json(doc: Any) -> None:
    check_table(doc)


@corpus_settings(max_examples=150, deadline_s=20)
@given(mutated_tables())
def test_mutated_valid_table(doc: Any) -> None:
    check_table(doc)


@corpus_settings(max_examples=30, deadline_s=20)
@given(st.one_of(st.binary(max_size=200),
                 st.sampled_from([b"", b"{", b"NaN", b'{"schema": NaN}', b"\xef\xbb\xbf{}", b"[]" * 1000,
                                  b'{"schema": 1e999}', json.dumps(VALID).encode()[:-1], b"\x00" * 10])))
def test_files_that_are_not_json(raw: bytes) -> None:
    check_table(None, raw)


def test_the_valid_table_loads() -> None:
    """The corpus's base document is a table (so mutations start from a valid one)."""
    table = TuningTable(VALID)
    assert table.choice("quantize", GROUP, "aligned", 0) == {"threads": 128, "units_per_thread": 1}
