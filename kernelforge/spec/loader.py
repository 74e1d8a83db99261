"""Read spec TOML files into validated, enumerated variants.

Every problem a user can cause raises SpecError naming the file, the table/key, the bad
value and, where the text search finds it, the line.
"""
from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from kernelforge.errors import SpecError
from kernelforge.registry import OP_SCHEMAS
from kernelforge.schema import SCHEMA_VERSIONS, OpSchema, Value
from kernelforge.spec.locate import find_line
from kernelforge.spec.model import KCLASS_NAME, KClass, Spec, Variant, kclass_problem

_TOP_KEYS = ("schema", "op", "axes", "exclude")
_NOWHERE = object()


class _File:
    """One spec file's path and text, for errors that point into it."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text

    def error(self, msg: str, table: str | None = None, key: str | None = None,
              value: object = _NOWHERE, occurrence: int = 0) -> SpecError:
        if table is None:
            where = key or ""
        else:
            header = f"[[{table}]] #{occurrence + 1}" if table == "exclude" else f"[{table}]"
            where = f"{header} {key}" if key else header
        line = find_line(self.text, table, key, None if value is _NOWHERE else value, occurrence)
        loc = f"{self.path}:{line}" if line else self.path
        return SpecError(f"{loc}: {where}: {msg}" if where else f"{loc}: {msg}")


def _as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def _header(f: _File, doc: Mapping[str, Any]) -> OpSchema:
    if "schema" not in doc:
        raise f.error(f"missing top-level key 'schema' (supported: {list(SCHEMA_VERSIONS)})")
    version = doc["schema"]
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        raise f.error(f"unsupported schema version {version!r}; supported: "
                      f"{list(SCHEMA_VERSIONS)}", key="schema")
    if "op" not in doc:
        raise f.error(f"missing top-level key 'op' (known ops: {sorted(OP_SCHEMAS)})")
    op = doc["op"]
    if not isinstance(op, str) or op not in OP_SCHEMAS:
        raise f.error(f"unknown op {op!r}; known ops: {sorted(OP_SCHEMAS)}", key="op", value=op)
    schema = OP_SCHEMAS[op]
    allowed = _TOP_KEYS + (schema.kclass_axis,)
    for key, value in doc.items():
        if key not in allowed:
            msg = f"unknown top-level key {key!r}; expected {list(allowed)}"
            raise f.error(msg, table=key) if isinstance(value, dict) else f.error(msg, key=key)
    return schema


def _kclasses(f: _File, doc: Mapping[str, Any], schema: OpSchema) -> dict[str, KClass]:
    table = schema.kclass_axis
    defs = doc.get(table, {})
    if not isinstance(defs, dict):
        raise f.error(f"expected tables [{table}.<name>], got {defs!r}", key=table)
    out = {}
    for name, fields in defs.items():
        where = f"{table}.{name}"
        if not KCLASS_NAME.fullmatch(name):
            raise f.error(f"K-class name {name!r} is not an identifier", table=where)
        if not isinstance(fields, dict):
            raise f.error(f"expected a table [{where}], got {fields!r}", table=table, key=name)
        bad = kclass_problem(fields, schema.kclass_required)
        if bad:
            key, reason = bad
            found = key in fields
            raise f.error(reason if found else f"missing key {key!r}", table=where,
                          key=key if found else None,
                          value=fields[key] if found else _NOWHERE)
        out[name] = KClass(name, **fields)
    return out


def _value_problem(schema: OpSchema, axis: str, value: Any,
                   kclasses: Mapping[str, KClass]) -> str | None:
    dom = schema.domains[axis]
    problem = dom.problem(value)
    if problem is None and dom.kclass and value not in kclasses:
        defined = sorted(kclasses)
        return (f"K-class {value!r} is not defined; add a [{axis}.{value}] table "
                f"(defined: {defined})")
    return problem


def _axes(f: _File, doc: Mapping[str, Any], schema: OpSchema,
          kclasses: Mapping[str, KClass]) -> dict[str, tuple[Value, ...]]:
    axes = doc.get("axes")
    if not isinstance(axes, dict):
        raise f.error(f"missing table [axes] with keys {list(schema.axes)}"
                      if axes is None else f"expected a table [axes], got {axes!r}", key="axes")
    for name in axes:
        if name not in schema.domains:
            raise f.error(f"unknown axis {name!r} for op {schema.name!r}; axes: "
                          f"{list(schema.axes)}", table="axes", key=name)
    out = {}
    for name in schema.axes:
        if name not in axes:
            raise f.error(f"missing required axis {name!r} (op {schema.name!r} needs "
                          f"{list(schema.axes)})", table="axes")
        values = axes[name]
        if not isinstance(values, list):
            raise f.error(f"expected a list of values, got {values!r}", table="axes", key=name)
        if not values:
            raise f.error("empty list; give at least one value", table="axes", key=name)
        for i, v in enumerate(values):
            problem = _value_problem(schema, name, v, kclasses)
            if problem:
                raise f.error(problem, table="axes", key=name, value=v)
            if v in values[:i]:
                first = values.index(v)
                raise f.error(f"value {v!r} listed twice (positions {first} and {i}); each "
                              "would produce the same variants", table="axes", key=name, value=v)
        out[name] = tuple(values)
    return out


def _excludes(f: _File, doc: Mapping[str, Any], schema: OpSchema,
              kclasses: Mapping[str, KClass]) -> list[dict[str, list[Value]]]:
    raw = doc.get("exclude", [])
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise f.error("expected [[exclude]] tables", key="exclude")
    out = []
    for n, rule in enumerate(raw):
        if not rule:
            raise f.error("empty [[exclude]] would exclude every variant", table="exclude",
                          occurrence=n)
        parsed = {}
        for axis, values in rule.items():
            if axis not in schema.domains:
                raise f.error(f"unknown axis {axis!r}; axes: {list(schema.axes)}",
                              table="exclude", key=axis, occurrence=n)
            values = _as_list(values)
            if not values:
                raise f.error("empty list excludes nothing", table="exclude", key=axis,
                              occurrence=n)
            for v in values:
                problem = _value_problem(schema, axis, v, kclasses)
                if problem:
                    raise f.error(problem, table="exclude", key=axis, value=v, occurrence=n)
            parsed[axis] = values
        out.append(parsed)
    return out


def _check_constraints(f: _File, schema: OpSchema, points: list[dict[str, Value]]) -> None:
    for c in schema.constraints:
        bad: dict[tuple[Value, ...], str] = {}
        for p in points:
            problem = c.problem(p)
            if problem:
                bad.setdefault(tuple(p[a] for a in c.axes), problem)
        if bad:
            combos = "; ".join(bad.values())
            # One line (a usage error is one line): the keys of each [[exclude]] table to add.
            suggestion = "; ".join(", ".join(f"{a} = {_toml(v)}" for a, v in zip(c.axes, combo)) for combo in bad)
            raise f.error(f"the product still holds invalid ({', '.join(c.axes)}) "
                          f"combinations: {combos}. Add an [[exclude]] table for each: {suggestion}")


def _toml(v: Value) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Parse and validate one spec file and enumerate its variants in product order.

    The product runs over the axes in schema order, each axis's values in file order,
    minus every point that matches all keys of some [[exclude]].
    """
    p = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or never end
            raise SpecError(f"{p}: cannot read spec file: not a regular file")
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"{p}: cannot read spec file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"{p}: not a UTF-8 text file (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                        "a spec file is TOML text") from None
    f = _File(p, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: invalid TOML: {e}") from None

    schema = _header(f, doc)
    kclasses = _kclasses(f, doc, schema)
    axes = _axes(f, doc, schema, kclasses)
    excludes = _excludes(f, doc, schema, kclasses)

    points = []
    for combo in itertools.product(*(axes[a] for a in schema.axes)):
        point = dict(zip(schema.axes, combo))
        if not any(all(point[a] in vs for a, vs in rule.items()) for rule in excludes):
            points.append(point)
    if not points:
        raise f.error("no variants left: the [[exclude]] rules remove the whole product")
    _check_constraints(f, schema, points)

    variants = tuple(
        Variant(schema.name, tuple(pt.items()), kclasses[pt[schema.kclass_axis]], p)
        for pt in points)
    return Spec(p, schema.name, doc["schema"], axes, kclasses, variants)


def load_specs(paths: Iterable[str | os.PathLike[str]]) -> list[Variant]:
    """The variants of all files, file by file in the order given.

    A variant name produced twice, a symbol shared by two names, or one op's K-class
    defined differently by two files is a SpecError naming both places.
    """
    by_name: dict[str, Variant] = {}
    by_symbol: dict[str, Variant] = {}
    kclass_home: dict[tuple[str, str], tuple[KClass, str]] = {}
    out = []
    for path in paths:
        spec = load_spec(path)
        for kc in spec.kclasses.values():
            prev = kclass_home.setdefault((spec.op, kc.name), (kc, spec.path))
            if prev[0] != kc:
                raise SpecError(
                    f"{spec.path}: [{OP_SCHEMAS[spec.op].kclass_axis}.{kc.name}] {kc.to_dict()} differs from its "
                    f"definition in {prev[1]} {prev[0].to_dict()}; one op's K-classes must "
                    "agree across files")
        for v in spec.variants:
            name = v.name
            if name in by_name:
                raise SpecError(f"duplicate variant {name}: produced by {by_name[name].spec_file} "
                                f"and by {v.spec_file}")
            if v.symbol in by_symbol:
                other = by_symbol[v.symbol]
                raise SpecError(f"variants {other.name} ({other.spec_file}) and {name} "
                                f"({v.spec_file}) map to the same symbol {v.symbol}")
            by_name[name] = by_symbol[v.symbol] = v
            out.append(v)
    return out
