"""Every spec mistake is a SpecError naming the file, the table/key, the value and the line."""
from __future__ import annotations

import pytest

from kernelforge.errors import SpecError
from kernelforge.spec import load_spec, load_specs


def _sub(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _append(extra: str):
    return lambda text: text + extra


def _prepend(extra: str):
    return lambda text: extra + text


DEFAULT_DTYPES = 'dtype = ["bfloat16", "float16", "float32"]'
DEFAULT_THREADS = "threads = [128, 256]"  # the tuning candidates of the default spec
LAST_EXCLUDE = '[[exclude]]                 # MX formats need a scale mode'

# (id, edit of the default spec, fragments the message holds, text of the line it must name)
CASES = [
    ("toml-syntax", _sub("\n[axes]\n", "\n[axes\n"), ["invalid TOML", "line"], None),
    ("schema-missing", _sub("schema = 1\n", ""), ["'schema'"], None),
    ("schema-version", _sub("schema = 1", "schema = 2"),
     ["schema", "unsupported schema version 2"], "schema = 2"),
    ("op-unknown", _sub('op = "quantize"', 'op = "dequant"'),
     ["op", "'dequant'", "quantize"], 'op = "dequant"'),
    ("op-missing", _sub('op = "quantize"\n', ""), ["'op'", "quantize"], None),
    ("top-level-unknown", _prepend("colour = 1\n"), ["'colour'"], "colour = 1"),
    ("axis-unknown", _sub("[axes]\n", '[axes]\ncolour = ["red"]\n'),
     ["[axes] colour", "unknown axis 'colour'", "units_per_thread"], 'colour = ["red"]'),
    ("axis-missing", _sub(DEFAULT_DTYPES + "\n", ""),
     ["[axes]", "missing required axis 'dtype'"], "[axes]"),
    ("axes-missing", lambda t: 'schema = 1\nop = "quantize"\n', ["missing table [axes]"], None),
    ("table-unknown", _sub("\n[axes]\n", "\n[axez]\n"), ["[axez]", "'axez'", "'axes'"], "[axez]"),
    ("axis-empty", _sub('layout = ["linear", "swizzled"]', "layout = []"),
     ["[axes] layout", "empty"], "layout = []"),
    ("axis-not-list", _sub('arch = ["sm_90a", "sm_100a"]', 'arch = "sm_90a"'),
     ["[axes] arch", "expected a list", "'sm_90a'"], 'arch = "sm_90a"'),
    ("value-unknown", _sub('"mxfp4", "nvfp4"]', '"mxfp9", "nvfp4"]'),
     ["[axes] format", "'mxfp9'", "'mxfp8', 'mxfp4', 'nvfp4'"], '"mxfp9"'),
    ("value-arch-unknown", _sub('"sm_100a"]', '"sm_89"]'),
     ["[axes] arch", "'sm_89'", "sm_120a"], '"sm_89"'),
    ("value-wrong-type", _sub(DEFAULT_THREADS, 'threads = ["x"]'),
     ["[axes] threads", "integer", "'x'"], 'threads = ["x"]'),
    ("value-bool", _sub("units_per_thread = [1]", "units_per_thread = [true]"),
     ["[axes] units_per_thread", "integer", "True"], "units_per_thread = [true]"),
    ("value-str-axis-int", _sub('layout = ["linear", "swizzled"]', 'layout = ["linear", 3]'),
     ["[axes] layout", "expected a str", "3"], 'layout = ["linear", 3]'),
    ("threads-not-warp-multiple", _sub(DEFAULT_THREADS, "threads = [128, 100]"),
     ["[axes] threads", "100", "multiple of 32"], "threads = [128, 100]"),
    ("threads-too-many", _sub(DEFAULT_THREADS, "threads = [2048]"),
     ["[axes] threads", "2048"], "threads = [2048]"),
    ("units-out-of-range", _sub("units_per_thread = [1]", "units_per_thread = [0]"),
     ["[axes] units_per_thread", "0", "1..16"], "units_per_thread = [0]"),
    ("value-duplicated", _sub(DEFAULT_DTYPES, 'dtype = ["bfloat16", "float16", "bfloat16"]'),
     ["[axes] dtype", "'bfloat16'", "twice", "positions 0 and 2"], 'dtype = ["bfloat16", "f'),
    ("exclude-axis-unknown", _append('\n[[exclude]]\ncolour = "red"\n'),
     ["[[exclude]] #3 colour", "unknown axis 'colour'"], 'colour = "red"'),
    ("exclude-value-unknown", _append('\n[[exclude]]\nformat = "mxfp9"\n'),
     ["[[exclude]] #3 format", "'mxfp9'", "mxfp8"], 'format = "mxfp9"'),
    ("exclude-kclass-undefined", _append('\n[[exclude]]\nkclass = "wide"\n'),
     ["[[exclude]] #3 kclass", "'wide'", "not defined"], 'kclass = "wide"'),
    ("exclude-empty", _append("\n[[exclude]]\n"), ["[[exclude]] #3", "every variant"], None),
    ("kclass-undefined", _sub('kclass = ["aligned", "any"]', 'kclass = ["aligned", "wide"]'),
     ["[axes] kclass", "'wide'", "not defined", "[kclass.wide]"],
     'kclass = ["aligned", "wide"]'),
    ("kclass-field-missing", _sub("vector_bytes = 0 ", "# "),
     ["[kclass.any]", "missing key 'vector_bytes'"], "[kclass.any]"),
    ("kclass-field-unknown", _sub("vector_bytes = 0 ", "vector_bytez = 0 "),
     ["[kclass.any] vector_bytez", "unknown key"], "vector_bytez = 0"),
    ("kclass-vector-bytes-invalid", _sub("vector_bytes = 0 ", "vector_bytes = 3 "),
     ["[kclass.any] vector_bytes", "got 3"], "vector_bytes = 3"),
    ("kclass-k-multiple-invalid", _sub("k_multiple_blocks = 4", 'k_multiple_blocks = "4"'),
     ["[kclass.aligned] k_multiple_blocks", "'4'"], 'k_multiple_blocks = "4"'),
    ("kclass-not-table", _sub("[kclass.any]\n", "[kclass]\nany = 3\n[kclass.other]\n"),
     ["[kclass] any", "expected a table [kclass.any], got 3"], "any = 3"),
    ("empty-product", _append('\n[[exclude]]\narch = ["sm_90a", "sm_100a"]\n'),
     ["no variants left"], None),
    ("invalid-combination", lambda t: t.split(LAST_EXCLUDE)[0],
     ["scale_mode 'none' is not valid for format 'mxfp8'", "format 'mxfp4'", "[[exclude]] table for each",
      'format = "mxfp8", scale_mode = "none"'], None),
]


@pytest.mark.parametrize("edit,fragments,line_text", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_spec_error(default_text, write_spec, edit, fragments, line_text):
    text = edit(default_text)
    path = write_spec(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg.strip() or "invalid TOML" in msg, msg  # one line, as the corpus requires
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    if line_text is not None:
        line = next(i for i, t in enumerate(text.splitlines(), 1)
                    if line_text in t and not t.lstrip().startswith("#"))
        assert msg.startswith(f"{path}:{line}: "), msg


def test_unreadable_file(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(SpecError, match="nope.toml: cannot read"):
        load_spec(missing)


def test_duplicate_across_files(default_text, write_spec):
    a = write_spec(default_text, "a.toml")
    b = write_spec(default_text.replace('arch = ["sm_90a", "sm_100a"]', 'arch = ["sm_100a"]'),
                   "b.toml")
    with pytest.raises(SpecError) as info:
        load_specs([a, b])
    msg = str(info.value)
    assert "duplicate variant quantize.mxfp8.floor.linear.bfloat16.aligned.sm_100a.t128u1" in msg
    assert str(a) in msg and str(b) in msg


def test_disjoint_files_combine(default_text, write_spec):
    a = write_spec(default_text.replace('arch = ["sm_90a", "sm_100a"]', 'arch = ["sm_90a"]'),
                   "a.toml")
    b = write_spec(default_text.replace('arch = ["sm_90a", "sm_100a"]', 'arch = ["sm_100a"]'),
                   "b.toml")
    variants = load_specs([a, b])
    assert len(variants) == 240
    assert [v.arch for v in variants[:120]] == ["sm_90a"] * 120
    assert {v.spec_file for v in variants[:120]} == {str(a)}
    assert {v.spec_file for v in variants[120:]} == {str(b)}


def test_kclass_defined_differently_across_files(default_text, write_spec):
    a = write_spec(default_text.replace('arch = ["sm_90a", "sm_100a"]', 'arch = ["sm_90a"]'),
                   "a.toml")
    b = write_spec(default_text.replace('arch = ["sm_90a", "sm_100a"]', 'arch = ["sm_100a"]')
                   .replace("vector_bytes = 16", "vector_bytes = 8"), "b.toml")
    with pytest.raises(SpecError, match=r"\[kclass\.aligned\].*differs") as info:
        load_specs([a, b])
    assert str(a) in str(info.value) and str(b) in str(info.value)
