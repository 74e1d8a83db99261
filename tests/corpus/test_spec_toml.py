"""Spec TOML (kernelforge/spec/loader.py): random bytes, the default specs with values replaced by
other TOML types (huge and special numbers, unicode, arrays, tables, dates), and line-level
mutations. Every file either loads (and its variants name, key and describe themselves) or raises
SpecError naming the file: never another exception, never a hang."""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kernelforge.errors import SpecError
from kernelforge.spec import load_spec, load_specs
from tests.corpus._corpus import Hang, corpus_settings, count, problem, time_limit

SPECS = sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.toml"))
TEXTS = [p.read_text(encoding="utf-8") for p in SPECS]
TARGET = "spec_toml"
VALUE_LINE = re.compile(r"^(\s*[A-Za-z0-9_.\"-]+\s*=\s*)(.*)$")

# TOML literals of every type, including values no spec means: huge, special, unicode.
scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0", "-1", "1", "9223372036854775807", "-9223372036854775808", "0x7fffffffffffffff",
                     "1e308", "1e-320", "inf", "-inf", "nan", "1_000", "0o777", "3.14"]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "inf")),
    st.booleans().map(lambda b: str(b).lower()),
    st.text(max_size=40).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(max_size=20).map(json.dumps),
    st.sampled_from(['"mxfp8"', '"sm_90a"', '"aligned"', '"bfloat16"', '"quantize"', '""', '"\u00e9\u4e2d"',
                     "'literal'", '"""multi\nline"""', "1979-05-27T07:32:00Z", "07:32:00", "1979-05-27"]),
)
literals = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner, max_size=3).map(
        lambda d: "{" + ", ".join(f"{k} = {v}" for k, v in d.items()) + "}")), max_leaves=6)


@st.composite
def replaced_values(draw) -> str:
    """A default spec with some `key = value` lines given other values."""
    lines = draw(st.sampled_from(TEXTS)).splitlines()
    idx = [i for i, line in enumerate(lines) if VALUE_LINE.match(line)]
    for i in draw(st.lists(st.sampled_from(idx), min_size=1, max_size=3, unique=True)):
        head = VALUE_LINE.match(lines[i]).group(1)
        lines[i] = head + draw(literals)
    return "\n".join(lines) + "\n"


@st.composite
def mutated_lines(draw) -> str:
    """A default spec with lines dropped, duplicated, truncated, or unicode/garbage inserted."""
    lines = draw(st.sampled_from(TEXTS)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "cut", "insert", "header", "key"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][:draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=30)))
        elif op == "header":
            lines.insert(i, draw(st.sampled_from(["[axes]", "[[exclude]]", "[kclass.x]", "[kclass]", "[axes.format]",
                                                  "[[axes]]", "[\u00e9]", "[kclass.\"a b\"]", "[h1k]"])))
        else:
            lines.insert(i, draw(st.sampled_from(["schema", "op", "format", "arch", "kclass", "max_k", "cluster",
                                                  "elements", "vector_bytes", "k_multiple_blocks", "m_multiple",
                                                  "threads", "\u00e9"])) + " = " + draw(literals))
    return "\n".join(lines) + "\n"


def check_spec(data: bytes, given_: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kf-corpus-spec-"))
    path = tmp / "spec.toml"
    path.write_bytes(data)
    t0 = time.monotonic()
    try:
        with time_limit(10):
            try:
                spec = load_spec(path)
                for v in spec.variants:  # what build, specs show and explain do with a loaded spec
                    v.name, v.symbol, v.canonical(), v.kclass.to_dict()
                load_specs([path])
                outcome = "loaded"
            except SpecError as exc:
                assert str(exc).startswith(str(path)), problem(TARGET, "wrong error", given_,
                                                               f"SpecError does not name the file: {exc}")
                assert "\n" not in str(exc).strip() or "invalid TOML" in str(exc), problem(
                    TARGET, "wrong error", given_, f"a SpecError of several lines: {exc!r}")
                outcome = "SpecError"
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001  (anything else is the bug this corpus looks for)
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(exc).__name__}: {exc}")) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    count(TARGET, outcome, time.monotonic() - t0)


@corpus_settings(max_examples=40, deadline_s=10)
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    check_spec(data, repr(data[:200]))


@corpus_settings(max_examples=90, deadline_s=10)
@given(replaced_values())
def test_values_of_other_types(text: str) -> None:
    check_spec(text.encode("utf-8", "surrogatepass"), text)


@corpus_settings(max_examples=60, deadline_s=10)
@given(mutated_lines())
def test_mutated_lines(text: str) -> None:
    check_spec(text.encode("utf-8", "surrogatepass"), text)
