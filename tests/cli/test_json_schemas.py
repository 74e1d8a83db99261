"""Every `--format json` output has a declared, versioned shape (kernelforge/cli/json_schemas.py):
each command's output on a crafted cache validates against its kind's JSON Schema, every
`--format json` option of the CLI has a kind, keys are snake_case, no command prints JSON around
`emit`, and docs/json-schemas.md is the page the module generates. No compiler needed."""
from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import pytest
import typer
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import app
from kernelforge.cli import json_schemas as js
from tests.cli._crafted import crafted_cache, publish

jsonschema = pytest.importorskip("jsonschema")  # the test extra

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
SNAKE = re.compile(r"[a-z][a-z0-9_]*")
ONE_VARIANT = "quantize.mxfp8.floor.linear.bfloat16.*.sm_90a.t128u1"
SPEC = REPO / "specs" / "quantize.toml"

# The commands with a `--format json` option and the kinds each prints.
COMMAND_KINDS = {
    "build": {"build", "build_reproducible"},
    "explain": {"explain_variants", "explain_call"},
    "specs show": {"specs_show"},
    **{f"cache {c}": {f"cache_{c}"} for c in ("dir", "ls", "stats", "verify", "repair", "clean", "gc", "limit",
                                              "merge", "push", "pull", "export", "import")},
}


def kf(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def check(result, kind: str, codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """The document `result` printed, validated against `kind`'s schema."""
    assert result.exit_code in codes, (result.exit_code, result.output, result.exception)
    doc = json.loads(result.stdout)
    jsonschema.Draft202012Validator(js.schema(kind)).validate(doc)
    assert list(doc)[:2] == ["schema", "schema_version"]
    assert doc["schema"] == f"kernelforge.{kind}" and doc["schema_version"] == js.KINDS[kind].version
    return doc


# ---- the outputs, one producer per kind ----

def _build(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from kernelforge.build import driver

    def fake(variants, store, **kw):  # no compiler: what a build reports
        out = [driver.VariantResult(variants[0].name, "built", 1.5, "e" * 64, reason="not built before",
                                    peak_rss_mb=512.0)]
        out += [driver.VariantResult(v.name, "up to date", 0.0, "f" * 64) for v in variants[1:]]
        return driver.BuildReport(out, 1.5, store.root)

    monkeypatch.setattr(driver, "build_variants", fake)
    r = kf("build", "--spec", str(SPEC), "--only", ONE_VARIANT, "--cache", str(store.root), "--format", "json",
           env={"KERNELFORGE_CACHE_MAX_SIZE": "1G"})
    doc = check(r, "build")
    assert doc["counts"]["up_to_date"] == 1 and doc["variants"][1]["status"] == "up_to_date"
    assert doc["gc"] is not None and doc["tuning_tables"] and doc["dry_run"] is False
    return doc


def _build_dry_run(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    r = kf("build", "--spec", str(SPEC), "--only", ONE_VARIANT, "--cache", str(tmp / "new"), "--dry-run",
           "--format", "json")
    doc = check(r, "build")
    assert doc["dry_run"] is True and {v["status"] for v in doc["variants"]} == {"would_build"}
    assert doc["counts"]["would_build"] == 2
    return doc


def _build_reproducible(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from kernelforge.build import reproducible as rep

    def fake(variants, store, **kw):
        return rep.ReproReport([rep.ReproResult(variants[0].name, "e" * 64, rep.OK, "1" * 64, "1" * 64),
                                rep.ReproResult("runtime", "r" * 64, rep.DIFFERS, "1" * 64, "2" * 64,
                                                "files differ: libkfrt.so")], cached=2, seconds=3.0)

    monkeypatch.setattr(rep, "check_reproducible", fake)
    r = kf("build", "--spec", str(SPEC), "--only", ONE_VARIANT, "--cache", str(store.root), "--check-reproducible",
           "--format", "json")
    doc = check(r, "build_reproducible", (1,))
    assert doc["ok"] is False and doc["counts"] == {"ok": 1, "differs": 1, "failed": 0}
    assert [x["status"] for x in doc["results"]] == ["ok", "differs"]
    return doc


def _explain_variants(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    r = kf("explain", ONE_VARIANT, "--spec", str(SPEC), "--cache", str(store.root), "--format", "json")
    doc = check(r, "explain_variants", (1,))  # the crafted keys are not those of this toolchain: misses
    assert any("nearest" in v for v in doc["variants"])
    return doc


def _explain_call(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    r = kf("explain", "quantize", "shape=128x8000", "format=mxfp8", "dtype=bf16", "--cache", str(store.root),
           "--format", "json")
    doc = check(r, "explain_call")
    assert doc["chosen"] is not None and {c["status"] for c in doc["candidates"]} >= {"chosen", "rejected"}
    return doc


def _specs_show(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return check(kf("specs", "show", "--spec", str(SPEC), "--arch", "sm_90a", "--format", "json"), "specs_show")


def _cache(cmd: str, *args: str, codes: tuple[int, ...] = (0,)) -> Callable[..., dict[str, Any]]:
    def produce(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        extra = [a.format(root=store.root, tmp=tmp) for a in args]
        return check(kf("cache", cmd, *extra, "--cache", str(store.root), "--format", "json"), f"cache_{cmd}", codes)
    return produce


def _verify(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    (store.entry_dir(store.index()["a" * 64]) / "module.so").write_bytes(b"tampered")
    doc = _cache("verify", codes=(1,))(tmp, store, monkeypatch)
    assert doc["problems"] and doc["layers"][0]["problems"]
    return doc


def _repair(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    (store.entry_dir(store.index()["a" * 64]) / "module.so").write_bytes(b"tampered")
    doc = _cache("repair")(tmp, store, monkeypatch)
    assert doc["quarantined"]
    return doc


def _gc(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    doc = _cache("gc", "--max-size", "1", "--dry-run")(tmp, store, monkeypatch)
    assert doc["removed"] and doc["dry_run"] is True
    return doc


def _merge(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    dest = CacheStore(tmp / "dest")
    publish(dest, "a" * 64, payload=b"other bytes")  # a conflict: refused and quarantined
    r = kf("cache", "merge", str(store.root), "--cache", str(dest.root), "--allow-unsigned", "--format", "json")
    doc = check(r, "cache_merge", (1,))
    assert doc["merged"] and doc["conflicts"] == 1 and doc["refused"][0]["dest_sha256"]
    return doc


def _push(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    pytest.importorskip("fsspec")
    doc = check(kf("cache", "push", f"file://{tmp}/remote", "--cache", str(store.root), "--format", "json"),
                "cache_push")
    assert doc["transferred"] and doc["action"] == "push"
    return doc


def _pull(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    _push(tmp, store, monkeypatch)
    doc = check(kf("cache", "pull", f"file://{tmp}/remote", "--cache", str(tmp / "pulled"), "--allow-unsigned",
                   "--format", "json"), "cache_pull")
    assert doc["transferred"]
    return doc


def _export(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    doc = check(kf("cache", "export", str(tmp / "b.tar.gz"), "--cache", str(store.root), "--format", "json"),
                "cache_export")
    assert doc["transferred"]
    return doc


def _import(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    _export(tmp, store, monkeypatch)
    doc = check(kf("cache", "import", str(tmp / "b.tar.gz"), "--cache", str(tmp / "imported"), "--allow-unsigned",
                   "--verify", "--format", "json"), "cache_import")
    assert doc["transferred"] and any(n.startswith("verify: OK") for n in doc["notes"])
    return doc


def _dry(cmd: str, *args: str) -> Callable[..., dict[str, Any]]:
    """A --dry-run of a writing command: its document says so."""
    def produce(tmp: Path, store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        extra = [a.format(root=store.root, tmp=tmp) for a in args]
        r = kf("cache", cmd, *extra, "--dry-run", "--cache", str(tmp / "dest"), "--allow-unsigned", "--format", "json")
        doc = check(r, f"cache_{cmd}")
        assert doc["dry_run"] is True and not (tmp / "dest" / "v1" / "index.json").exists()
        return doc
    return produce


PRODUCERS: dict[str, list[Callable[..., dict[str, Any]]]] = {
    "build": [_build, _build_dry_run],
    "build_reproducible": [_build_reproducible],
    "explain_variants": [_explain_variants],
    "explain_call": [_explain_call],
    "specs_show": [_specs_show],
    "cache_dir": [_cache("dir")],
    "cache_ls": [_cache("ls")],
    "cache_stats": [_cache("stats")],
    "cache_verify": [_cache("verify"), _verify],
    "cache_repair": [_repair],
    "cache_clean": [_cache("clean", "--all"), _cache("clean", "--all", "--dry-run")],
    "cache_gc": [_gc],
    "cache_limit": [_cache("limit", "10M")],
    "cache_merge": [_merge, _dry("merge", "{root}")],
    "cache_push": [_push],
    "cache_pull": [_pull],
    "cache_export": [_export],
    "cache_import": [_import, lambda tmp, store, mp: (_export(tmp, store, mp), _dry("import", "{tmp}/b.tar.gz")(
        tmp, store, mp))[1]],
}
CASES = [pytest.param(kind, i, id=f"{kind}-{i}") for kind in js.KINDS for i in range(len(PRODUCERS.get(kind, [0])))]


@pytest.mark.parametrize(("kind", "i"), CASES)
def test_output_validates_against_its_schema(kind: str, i: int, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert kind in PRODUCERS, f"kind {kind!r} has no output test here"
    store = crafted_cache(tmp_path / "cache")
    PRODUCERS[kind][i](tmp_path, store, monkeypatch)


def test_check_reproducible_with_nothing_cached_prints_no_json(tmp_path: Path) -> None:
    """The one outcome without a report: an error line on stderr, exit 2, stdout empty."""
    pytest.importorskip("cutlass")  # the check needs the build toolchain's keys
    r = kf("build", "--spec", str(SPEC), "--only", ONE_VARIANT, "--cache", str(tmp_path / "empty"),
           "--check-reproducible", "--format", "json")
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.splitlines()[-1].startswith("error: none of the"), r.output


# ---- the definitions ----

@pytest.mark.parametrize("kind", list(js.KINDS))
def test_schema_is_valid_and_snake_case(kind: str) -> None:
    full = js.schema(kind)
    jsonschema.Draft202012Validator.check_schema(full)
    assert full["properties"]["schema"]["const"] == f"kernelforge.{kind}" and SNAKE.fullmatch(kind)

    def walk(s: Any, path: str) -> None:
        if isinstance(s, dict):
            for key in s.get("properties", {}):
                assert SNAKE.fullmatch(key), f"{kind}: key {path}.{key} is not snake_case"
            for value in s.get("enum", []):
                assert SNAKE.fullmatch(value), f"{kind}: value {value!r} of {path} is not snake_case"
            if s.get("type") in ("object", ["object", "null"]) and "properties" in s:
                assert s.get("additionalProperties") is False, f"{kind}: {path} is not closed"
            for key, sub in s.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(s, list):
            for sub in s:
                walk(sub, path)

    walk(full, kind)


def test_emit_refuses_a_report_that_holds_a_header_key() -> None:
    with pytest.raises(ValueError, match="header key"):
        js.document("cache_dir", {"schema": 1, "root": "/x", "root_source": "user"})


def _choices(param: Any) -> set[str]:
    """The values an option takes (typer keeps the Enum annotation; click a Choice type)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {str(m.value) for m in annotation}
    return {str(c) for c in getattr(getattr(param, "type", None), "choices", None) or ()}


def _json_commands() -> set[str]:
    found: set[str] = set()

    def walk(cmd: Any, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}".strip())
            return
        if any("--format" in getattr(p, "opts", ()) and "json" in _choices(p) for p in cmd.params):
            found.add(path)

    walk(typer.main.get_command(app), "")
    return found


def test_every_format_json_option_has_a_kind() -> None:
    assert _json_commands() == set(COMMAND_KINDS), "a command with --format json lacks a kind, or left"
    assert set().union(*COMMAND_KINDS.values()) == set(js.KINDS)


def test_commands_print_json_only_through_emit() -> None:
    raw = re.compile(r"(print|echo)\(\s*json\.dumps")
    for path in sorted((REPO / "kernelforge" / "cli").glob("*.py")):
        if path.name != "json_schemas.py":
            assert not raw.search(path.read_text(encoding="utf-8")), f"{path.name} prints JSON around emit()"


def test_docs_page_is_generated() -> None:
    page = REPO / "docs" / "json-schemas.md"
    assert page.read_text(encoding="utf-8") == js.markdown(), (
        "docs/json-schemas.md is stale: python -m kernelforge.cli.json_schemas --markdown > docs/json-schemas.md")


def test_module_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert js.main(["--nonsense"]) == 2
    assert js.main(["--json", "cache_ls"]) == 0
    assert json.loads(capsys.readouterr().out) == js.schema("cache_ls")
