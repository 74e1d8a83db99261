"""The schema of a tuning table, declared once and checked wherever a table comes in.

A tuning table is data from elsewhere (a GPU node's `kernelforge tune`, a committed file under
`kernelforge/data/tuning/`, a cache entry): `validate_table` is called where one is imported
(`kernelforge.build.tables`), published, verified (`cache verify`, `cache repair`) and parsed at
run time (`kernelforge.runtime.tuning.TuningTable`), so a malformed table is refused at import
with the key path that is wrong, and skipped at run time (the heuristic serves) instead of
failing every call of an op.

Plain functions, no classes but the error: the runtime imports this on its first call. It lives
in the cache's read path, below the runtime and the tuner that read and write tables, because
`cache verify` and `cache repair` check every table the cache holds.

```
{"schema": 1, "m_buckets": [256, 4096],           exactly these
 "device": "NVIDIA H100 80GB HBM3",                a non-empty string (the CUDA device name)
 "arch": "sm_90a",                                 a non-empty name of [A-Za-z0-9_.-]
 "created": "2026-11-26T12:52:29+00:00",           a non-empty string (when it was measured)
 "sources": {op: kernel source hash},              strings
 "choices": {group: {kclass: [values | null, ...]}},   one entry per M bucket (at most 3), each an
                                                   object of tuning axis -> string/number/bool
 "toolchain_id": str, "bucket_sample_m": [int], "timings_us": {...},   optional
 "staging": {"min_elements": {"<format>.<outputs>": int >= 0 | null},     optional: the columnwise
             "timings_us": {...}}}                 op's staged linear-scale rule on this card; the
                                                   table's sources then name both ops it rests on
```
"""
from __future__ import annotations

import re
from typing import Any

SCHEMA = 1
M_BUCKETS = (256, 4096)  # upper bounds of M for the first buckets; the last bucket is open
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PAIR = re.compile(r"[a-z0-9]+\.(dual|columnwise)")  # a staging rule's (format, output set)
# The ops a staging rule's measurement rests on: the columnwise kernels and the layout pass.
STAGING_OPS = ("quantize_columnwise", "scale_layout")


class TableSchemaError(ValueError):
    """A tuning table does not follow the schema; the message names the key path and what was expected."""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, (int, float)):
        return f"{value!r} (a number)"
    if isinstance(value, str):
        return f"{value[:40]!r} (a string)"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _fail(path: str, expected: str, value: Any) -> TableSchemaError:
    return TableSchemaError(f"{path}: expected {expected}, found {_kind(value)}")


def _key(path: str, name: str) -> str:
    return f'{path}["{name}"]' if path else name


def _string(data: dict, name: str, *, pattern: re.Pattern | None = None, optional: bool = False) -> None:
    if name not in data:
        if optional:
            return
        raise TableSchemaError(f"{name}: missing (expected a non-empty string)")
    value = data[name]
    if not isinstance(value, str) or not value or (pattern is not None and not pattern.fullmatch(value)):
        raise _fail(name, "a non-empty string" + (" of letters, digits, '_', '.', '-'" if pattern else ""), value)


def _object(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(path, "an object", value)
    for k in value:
        if not isinstance(k, str) or not k:
            raise _fail(path, "an object with non-empty string keys", k)
    return value


def _plain_object(value: Any) -> bool:
    """Whether `_object` accepts `value`."""
    return isinstance(value, dict) and all(isinstance(k, str) and k for k in value)


def _plain_choices(per_bucket: list) -> bool:
    """Whether `_choices` accepts the choices of one K-class."""
    for values in per_bucket:
        if values is None:
            continue
        if not isinstance(values, dict):
            return False
        for axis, value in values.items():
            if not isinstance(axis, str) or not axis or not isinstance(value, (str, int, float)):  # bool is an int
                return False
    return True


def _group(group: str, per_class: Any) -> None:
    """Raise TableSchemaError for a group of `choices` whose key or value is wrong."""
    gpath = _key("choices", group)
    if "|" not in group:
        raise TableSchemaError(f"{gpath}: expected a dispatch group key of the form 'op|axis=value,...'")
    _object(per_class, gpath)


def _choices(per_bucket: list, kpath: str) -> None:
    """Raise TableSchemaError naming the first key path that is wrong in the choices of one
    K-class: each null or an object of tuning axis -> string, number or boolean."""
    for i, values in enumerate(per_bucket):
        if values is None:
            continue
        vpath = f"{kpath}[{i}]"
        for axis, value in _object(values, vpath).items():
            if not isinstance(value, (str, int, float)):  # bool is an int
                raise _fail(_key(vpath, axis), "a string, number or boolean (a tuning axis value)", value)


def validate_table(data: Any) -> None:
    """Raise TableSchemaError (a ValueError) naming the first key path of `data` that is not a
    tuning table's (see the module docstring); return None for a valid table."""
    if not isinstance(data, dict):
        raise _fail("the table", "a JSON object", data)
    if "schema" not in data:
        raise TableSchemaError(f"schema: missing (expected {SCHEMA})")
    if data["schema"] != SCHEMA or isinstance(data["schema"], bool):
        raise _fail("schema", f"{SCHEMA} (the only tuning-table schema this kernelforge reads)", data["schema"])
    if data.get("m_buckets") != list(M_BUCKETS):
        raise _fail("m_buckets", f"{list(M_BUCKETS)} (the M buckets this kernelforge dispatches on)",
                    data.get("m_buckets"))
    _string(data, "device")
    _string(data, "arch", pattern=_NAME)
    _string(data, "created")
    _string(data, "toolchain_id", optional=True)
    for name in ("sources", "choices"):
        if name not in data:
            raise TableSchemaError(f"{name}: missing (expected an object)")
    for op, digest in _object(data["sources"], "sources").items():
        if not isinstance(digest, str):
            raise _fail(_key("sources", op), "a string (the op's kernel source hash)", digest)
    buckets = len(M_BUCKETS) + 1
    # The runtime validates a whole table on its first call: the key paths of the messages are
    # built only for the group or K-class that fails (`_group`, `_choices`), checked in the same order.
    for group, per_class in _object(data["choices"], "choices").items():
        if "|" not in group or not _plain_object(per_class):
            _group(group, per_class)
        for kclass, per_bucket in per_class.items():
            if not isinstance(per_bucket, list) or len(per_bucket) > buckets:
                raise _fail(_key(_key("choices", group), kclass), f"a list of at most {buckets} choices (one per "
                            "M bucket)", per_bucket)
            if not _plain_choices(per_bucket):
                _choices(per_bucket, _key(_key("choices", group), kclass))
    if "bucket_sample_m" in data and (not isinstance(data["bucket_sample_m"], list) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in data["bucket_sample_m"])):
        raise _fail("bucket_sample_m", "a list of integers", data["bucket_sample_m"])
    if "timings_us" in data:
        _object(data["timings_us"], "timings_us")
    if "staging" in data:
        _staging(data)


def _staging(data: dict) -> None:
    staging = _object(data["staging"], "staging")
    if "min_elements" not in staging:
        raise TableSchemaError('staging["min_elements"]: missing (expected an object)')
    for pair, threshold in _object(staging["min_elements"], 'staging["min_elements"]').items():
        path = f'staging["min_elements"]["{pair}"]'
        if not _PAIR.fullmatch(pair):
            raise TableSchemaError(f"{path}: expected a key of the form '<format>.dual' or '<format>.columnwise'")
        if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0):
            raise _fail(path, "an integer >= 0 (elements) or null (never staged)", threshold)
    if "timings_us" in staging:
        _object(staging["timings_us"], 'staging["timings_us"]')
    missing = [op for op in STAGING_OPS if op not in data["sources"]]
    if missing:
        raise TableSchemaError(f"sources: missing {', '.join(missing)} (a table with a staging rule records the "
                               f"kernel sources of {' and '.join(STAGING_OPS)})")
