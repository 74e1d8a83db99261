"""Command lines: random argument vectors for every command of the CLI (read from typer's command
tree, so a new command or option is covered without a change here), run in-process with typer's
CliRunner against a crafted cache (tests/cli/_crafted.py) copied into a fresh directory per case,
with random settings in the environment (docs/settings.md) and values from hostile pools: missing
paths, plain and binary files, a FIFO, a symlink, unicode, huge and negative numbers, bad globs,
URLs that fail fast.

Every run must end with exit code 0, 1 or 2; print no traceback and let no exception escape;
exit 2 says why in one `error:` line on stderr; `--format json` prints one document that validates
against its kind's schema (kernelforge/cli/json_schemas.py), or nothing when exit 1 printed an
error; and no command but `cache gc`, `cache clean --all/--stale` and a size-limited `build` may
lose an intact entry of the crafted caches.

Nothing compiles: `build` plans (a dry run) instead of compiling, `--check-reproducible` and
`--rebuild-sample` get stand-ins, and the checkout's own cache/ is never a default root.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import app
from tests.cli._crafted import crafted_cache, publish
from tests.corpus._corpus import Hang, corpus_settings, count, known, problem, time_limit

# Hostile inputs make the product warn (an unreadable index, ...): expected here, not reported.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = "cli_args"
REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
ON_GPU = False
try:  # a GPU machine would really tune and run the GPU tests: those commands are left out there
    import torch

    ON_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    pass

PATHS = ["{root}", "{other}", "{empty}", "{missing}", "{file}", "{binary}", "{fifo}", "{link}", "{unicode}", "",
         ".", "{spec}", "{bundle}", "{table}"]
GLOBS = ["*", "quantize.*", "quantize.mxfp8.floor.linear.bfloat16.*.sm_90a.t128u1", "nothing*", "", "[", "[!",
         "\u00e9*", "q" * 300, "*.sm_90a.*", "runtime-*", "a" * 64]
SIZES = ["1", "0", "-1", "2G", "500M", "1.5GiB", "512Mi", "none", "off", "1e400", "x", "", " 1 ", "99999999999999999999999",
         "1.5", "0x10", "\u0661", "1K"]
AGES = ["30d", "0s", "12h", "90m", "2w", "1", "-1d", "99999999999999999999d", "", "d", "1.5h", "\u0661d", "nan"]
NUMBERS = ["1", "0", "-1", "2", "x", "", "1.5", "99999999999999999999", "nan", "inf", "-inf", "1e9", "\u0661"]
URLS = ["file://{remote}", "file://{missing}", "file://{file}", "{remote}", "http://127.0.0.1:1/x", "https://127.0.0.1:1/",
        "gs://bucket/x", "ftp://x", "::", "", "file://", "memory://x", "s3://", "\u00e9://x", "file://{fifo}"]
TEXT = ["", "x", "\u00e9\u4e2d\U0001f600", "a" * 500, "--", "-", "--help", "'quoted'", "a b", "$HOME", "%s%n"]
POOLS: dict[str, list[str]] = {
    "cache": PATHS, "spec": ["{spec}", "{specdir}", "{badspec}", "{binary}", "{fifo}", "{missing}", "{empty}",
                             "{file}", "", "{unicode}"],
    "only": GLOBS, "arch": ["sm_90a", "sm_100a", "sm_90", "sm_120a", "", "x" * 200, "SM_90A", "sm_9\u00e9"],
    "jobs": NUMBERS, "progress_interval": NUMBERS, "sample": NUMBERS, "max_size": SIZES, "size": SIZES,
    "older_than": AGES, "shard": ["1/2", "2/2", "3/2", "0/0", "1/0", "x", "", "1/", "/2", "-1/2", "1/99999999999999999999"],
    "remote": URLS, "url": URLS, "rebuild_sample": NUMBERS + ["0.5", "2.0"],
    "trusted_keys": ["{pub}", "{key}", "{file}", "{binary}", "{fifo}", "{missing}", "{empty}", ""],
    "key": ["{key}", "{pub}", "{file}", "{binary}", "{fifo}", "{missing}", "{empty}", ""],
    "sign_key": ["{key}", "{pub}", "{binary}", "{fifo}", "{missing}", ""],
    "import_": ["{table}", "{badtable}", "{binary}", "{fifo}", "{missing}", "{empty}", "{spec}", ""],
    "export": ["{out}/table.json", "{empty}", "{file}", "{missing}/t.json", "{fifo}", ""],
    "out": ["{out}", "{empty}", "{file}", "{fifo}", "dist", ""],
    "file": ["{bundle}", "{out}/b.tar.gz", "{binary}", "{file}", "{fifo}", "{missing}", "{empty}", "{link}", "",
             "{root}/v1/index.json"],
    "sources": ["{other}", "{root}", "{empty}", "{missing}", "{file}", "{fifo}", "{link}", ""],
    "path": ["{out}/k.key", "k.key", "{file}", "{empty}", "{missing}/k", "{fifo}", ""],
    "target": ["quantize", "rmsnorm_quantize", "quantize_columnwise", "quantize_grouped", "scale_layout",
               "quantize.mxfp8.floor.linear.bfloat16.*.sm_90a.t128u1", "quantize.*", "nothing", "", "*", "["],
    "args": ["shape=128x8000", "shape=4096x7168", "shape=1x1", "shape=0x0", "shape=-1x64", "shape=x",
             "shape=99999999999999999999x64", "m=128", "m=-5", "k=0", "k=64", "k=x", "format=mxfp8",
             "format=nvfp4", "format=nope", "dtype=bf16", "dtype=float16", "dtype=x", "layout=linear",
             "layout=swizzled", "scale_mode=floor", "align=16", "align=0", "align=-8", "stride=0", "stride=x",
             "arch=sm_90a", "arch=sm_100a", "arch=x", "device=NVIDIA H100 80GB HBM3", "outputs=dual",
             "transform=none", "residual=add", "nokey", "=", "a=b=c", "\u00e9=\u00e9"],
    "device_name": TEXT, "comment": TEXT, "dist": ["kernelforge", "kernelforge-kernels-sm90a", "x", ""],
}
ENV_POOLS: dict[str, list[str | None]] = {
    "KERNELFORGE_CACHE_DIR": ["{root}", "{missing}", "{file}", "{empty}", "{other}"],
    "KERNELFORGE_SPEC_DIR": [None, None, "{specdir}", "{empty}", "{missing}", "{file}"],
    "KERNELFORGE_CACHE_MAX_SIZE": [None, None, "1", "2G", "x", "-1", "0"],
    "KERNELFORGE_PROGRESS_INTERVAL": [None, "x", "0", "-1", "nan", "1e308"],
    "KERNELFORGE_TRUSTED_KEYS": [None, None, "{pub}", "{missing}", "{binary}", "{pub}:{file}", ":"],
    "KERNELFORGE_ALLOW_UNSIGNED": [None, "*", "", ",,,", "[", "file://*"],
    "KERNELFORGE_TRUST_SHARED_CACHE": [None, "1", "0", "yes"],
    "KERNELFORGE_RECORD_USAGE": [None, "0", "1", "x"],
    "KERNELFORGE_LOG": [None, None, "info", "debug", "x"],
    "KERNELFORGE_REMOTE_TIMEOUT": ["2", "2", "0", "-1", "x", "99999"],
    "KERNELFORGE_MAX_ARTIFACT_BYTES": [None, None, "1", "0", "x", "1G"],
    "KERNELFORGE_MAX_INDEX_BYTES": [None, None, "10", "0", "x"],
}
ONE = "quantize.mxfp8.floor.linear.bfloat16.*.sm_90a.t128u1"
# Values that make sense, drawn more often than the hostile pools above, so that runs get past argument
# checks into the commands' work.
VALID: dict[str, list[str]] = {
    "cache": ["{root}", "{root}", "{other}"], "spec": ["{spec}", "{specdir}"], "only": [ONE, "quantize.*", "*"],
    "arch": ["sm_90a", "sm_100a"], "jobs": ["1", "2"], "progress_interval": ["0.1", "30"], "sample": ["1", "4"],
    "max_size": ["2G", "1"], "size": ["10M", "none", "2G"], "older_than": ["30d", "0s"], "shard": ["1/2", "2/2"],
    "remote": ["file://{remote}"], "url": ["file://{remote}"], "rebuild_sample": ["1", "0.5"],
    "trusted_keys": ["{pub}"], "key": ["{key}"], "sign_key": ["{key}"], "import_": ["{table}"],
    "export": ["{out}/table.json"], "out": ["{out}"], "file": ["{bundle}", "{out}/b.tar.gz"],
    "sources": ["{other}"], "path": ["{out}/k.key"], "target": ["quantize", ONE, "quantize_columnwise"],
    "args": ["shape=128x8000", "format=mxfp8", "dtype=bf16", "shape=4096x7168", "layout=linear"],
    "device_name": ["NVIDIA H100 80GB HBM3"], "comment": ["ci"], "dist": ["kernelforge"],
}
# typer's multi-line usage box (a usage error must be one `error:` line instead).
USAGE_BOX = re.compile(r"Usage: |Try '.* --help'|[\u256d\u2502\u2570]")


def _commands() -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, path + (name,))
            return
        found[" ".join(path)] = cmd

    walk(typer.main.get_command(app), ())
    if ON_GPU:
        found.pop("tune", None)
        found.pop("validate", None)
    return found


COMMANDS = _commands()
GROUPS = {"cache", "key", "specs"}


def _choices(param: Any) -> list[str]:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [str(m.value) for m in annotation]
    return []


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False)) and getattr(param, "param_type_name", "") == "option"


@st.composite
def command_lines(draw, mutate: bool = False) -> tuple[list[str], dict[str, str | None]]:
    """(argv with {placeholders}, environment) for one command."""
    path = draw(st.sampled_from(sorted(COMMANDS)))
    cmd = COMMANDS[path]
    argv = path.split()
    positional: list[str] = []

    def value(name: str, choices: list[str]) -> str:
        valid = choices or VALID.get(name, [])
        hostile = (["yaml", "", "JSON"] if choices else POOLS.get(name, TEXT))
        return draw(st.sampled_from(valid if valid and draw(st.integers(0, 9)) < 6 else hostile))

    for p in cmd.params:
        kind = getattr(p, "param_type_name", "option")
        if kind == "argument":
            if not p.required and not draw(st.booleans()):
                continue
            if p.name == "args" and draw(st.booleans()):  # a whole call, then perhaps an odd argument
                positional += ["shape=128x8000", "format=mxfp8", "dtype=bf16"]
            n = draw(st.integers(1, 3)) if p.nargs == -1 else 1
            positional += [value(p.name, []) for _ in range(n)]
            continue
        if not p.required and not draw(st.integers(0, 2)) == 0:
            continue
        flag = draw(st.sampled_from([o for o in p.opts + list(getattr(p, "secondary_opts", []) or [])]))
        if _is_flag(p):
            argv.append(flag)
            continue
        for _ in range(draw(st.integers(1, 2)) if p.multiple else 1):
            argv += [flag, value(p.name, _choices(p))]
    if positional:
        if path != "explain" and draw(st.integers(0, 3)) == 0:  # after `--`, where options end
            argv += ["--", *positional]
        else:
            at = draw(st.integers(len(path.split()), len(argv)))
            while at < len(argv) and argv[at - 1].startswith("-") and at > len(path.split()):
                at += 1  # never between an option and its value
            argv[at:at] = positional
    if mutate:
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(["insert", "drop", "dup", "help"]))
            if op == "insert":
                argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(
                    ["--bogus", "-", "--", "-x", "--cache", "--format", "json", "--only=", "--jobs=-1", "\u00e9",
                     "--arch=sm_90a", "--no-such", "-vvv", "--spec=", "=", "--help", "--version"])))
            elif op == "drop" and len(argv) > 1:
                del argv[draw(st.integers(0, len(argv) - 1))]
            elif op == "dup" and argv:
                argv.append(draw(st.sampled_from(argv)))
            elif op == "help":
                argv.append("--help")
    env: dict[str, str | None] = {name: None for name in ENV_POOLS}
    env["KERNELFORGE_CACHE_DIR"], env["KERNELFORGE_REMOTE_TIMEOUT"] = "{root}", "2"
    if draw(st.booleans()):  # settings from the environment, some hostile
        for name in draw(st.lists(st.sampled_from(sorted(ENV_POOLS)), min_size=1, max_size=3, unique=True)):
            env[name] = draw(st.sampled_from(ENV_POOLS[name]))
    return argv, env


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files each case starts from (copied per case)."""
    from kernelforge.cache.read.signing import generate_key
    from kernelforge.cache.transfer.bundle import export_bundle

    t = tmp_path_factory.mktemp("cli-template")
    os.chmod(t, 0o755)
    crafted_cache(t / "root")
    other = crafted_cache(t / "other")
    publish(other, "a" * 64, payload=b"other bytes for the same key")  # a conflict for merges (kept: same key)
    publish(other, "9" * 64, kclass="any", threads=256)
    (t / "empty").mkdir()
    (t / "file").write_text("not a cache\n")
    (t / "binary").write_bytes(bytes(range(256)) * 4)
    spec = REPO / "specs" / "quantize.toml"
    (t / "spec.toml").write_bytes(spec.read_bytes())
    (t / "specdir").mkdir()
    (t / "specdir" / "quantize.toml").write_bytes(spec.read_bytes())
    (t / "badspec.toml").write_text("schema = 1\nop = 'quantize'\n[axes]\nformat = [1, 2]\n")
    table = next((REPO / "kernelforge" / "data" / "tuning").glob("*.json"))
    (t / "table.json").write_bytes(table.read_bytes())
    (t / "badtable.json").write_text('{"schema": 1, "choices": []}')
    export_bundle(CacheStore(t / "root"), t / "bundle.tar.gz")
    generate_key(t / "release.key", "corpus")
    try:
        from kernelforge.cache.transfer.remote import push

        push(CacheStore(t / "root"), f"file://{t / 'remote'}")
    except Exception:  # noqa: BLE001  (no fsspec: the remote stays missing)
        pass
    return t


@pytest.fixture(scope="module")
def no_compiler() -> Any:
    """Stand-ins for what would compile, and no checkout cache/ as a default root."""
    mp = pytest.MonkeyPatch()
    from kernelforge import config
    from kernelforge.build import driver, reproducible

    real = driver.build_variants

    def plan_only(variants, store, **kw):
        kw = {k: v for k, v in kw.items() if k in ("verify", "shard")}
        return real(variants, store, dry_run=True, **kw)

    def fake_check(variants, store, *, sample=4, seed=0, jobs=None, shard=None):
        return reproducible.ReproReport([reproducible.ReproResult("runtime", "r" * 64, reproducible.OK, "1" * 64,
                                                                  "1" * 64)], cached=1, seconds=0.0)

    mp.setattr(config, "checkout_root", lambda: None)
    mp.setattr(driver, "build_variants", plan_only)
    mp.setattr(reproducible, "check_reproducible", fake_check)
    try:
        from kernelforge.build import audit

        mp.setattr(audit, "rebuild_auditor", lambda sample, paths, **kw: (lambda entries: None))
    except ImportError:  # pragma: no cover
        pass
    yield
    mp.undo()


def _context(template: Path) -> tuple[Path, dict[str, str]]:
    ex = Path(tempfile.mkdtemp(prefix="kf-corpus-cli-"))
    os.chmod(ex, 0o755)
    shutil.copytree(template, ex / "t", symlinks=True)
    t = ex / "t"
    os.mkfifo(t / "fifo")
    (t / "link").symlink_to(t / "root")
    (t / "home").mkdir()
    ctx = {"root": t / "root", "other": t / "other", "empty": t / "empty", "missing": t / "missing" / "nested",
           "file": t / "file", "binary": t / "binary", "fifo": t / "fifo", "link": t / "link",
           "unicode": t / "\u00fcn\u00efc\u00f6d\u00e9 \u4e2d", "spec": t / "spec.toml", "specdir": t / "specdir",
           "badspec": t / "badspec.toml", "bundle": t / "bundle.tar.gz", "table": t / "table.json",
           "badtable": t / "badtable.json", "key": t / "release.key", "pub": t / "release.key.pub",
           "remote": t / "remote", "out": t / "out"}
    return ex, {k: str(v) for k, v in ctx.items()}


def _resolve(value: str, ctx: dict[str, str]) -> str:
    for k, v in ctx.items():
        value = value.replace("{" + k + "}", v)
    return value


def _entries(root: str) -> dict[str, dict[str, Any]]:
    """key -> files of the intact entries of a crafted cache (as its index and disk say)."""
    store = CacheStore(root)
    out = {}
    for key, e in store.index(fresh=True).items():
        d = store.entry_dir(e)
        if all((d / rel).is_file() and (d / rel).stat().st_size == int(info["size"]) for rel, info in e.files.items()):
            out[key] = e.files
    return out


def _may_remove(argv: list[str], env: dict[str, str | None]) -> bool:
    """Whether the command may remove intact entries: gc, clean --all/--stale, a build under a size limit."""
    words = set(argv)
    if "gc" in words or ("clean" in words and words & {"--all", "--stale"}):
        return True
    return "build" in words and bool("--max-size" in words or env.get("KERNELFORGE_CACHE_MAX_SIZE"))


def run_case(template: Path, argv_t: list[str], env_t: dict[str, str | None]) -> None:
    ex, ctx = _context(template)
    argv = [_resolve(a, ctx) for a in argv_t]
    env = {k: (_resolve(v, ctx) if v is not None else None) for k, v in env_t.items()}
    env.update({"HOME": str(ex / "t" / "home"), "XDG_CACHE_HOME": str(ex / "t" / "home" / ".cache"),
                "XDG_CONFIG_HOME": str(ex / "t" / "home" / ".config"), "COLUMNS": "200",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"})
    given_ = "kernelforge " + " ".join(repr(a) if (not a or " " in a) else a for a in argv_t) + "  env: " + \
        " ".join(f"{k}={v}" for k, v in env_t.items() if v is not None)
    before = {r: _entries(ctx[r]) for r in ("root", "other")}
    cwd = os.getcwd()
    t0 = time.monotonic()
    try:
        os.chdir(ex)
        with time_limit(30):
            result = runner.invoke(app, argv, env=env)
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    finally:
        os.chdir(cwd)
        for h in list(logging.getLogger("kernelforge").handlers):  # KERNELFORGE_LOG's handler holds the run's stderr
            logging.getLogger("kernelforge").removeHandler(h)
    seconds = time.monotonic() - t0
    try:
        outcome = check_result(argv, env, result, given_, seconds)
        if outcome is None:
            return
        if not _may_remove(argv, env):
            for r, entries in before.items():
                after = _entries(ctx[r])
                lost = sorted(k[:12] for k, files in entries.items() if after.get(k) != files)
                if lost and _known_loss(argv, env, ctx):
                    known(TARGET, _known_loss(argv, env, ctx), given_, seconds)
                    return
                assert not lost, problem(TARGET, "data loss", given_, f"intact entries of {{{r}}} lost: {lost}")
        count(TARGET, outcome, seconds)
    finally:
        shutil.rmtree(ex, ignore_errors=True)


def _known_loss(argv: list[str], env: dict, ctx: dict[str, str]) -> str | None:
    """The known open bug behind a loss of entries, if it is one."""
    if "export" in argv and any(a.startswith(ctx[r] + os.sep + "v1") for a in argv for r in ("root", "other")):
        return "export-into-cache"
    if env.get("KERNELFORGE_MAX_INDEX_BYTES") and ("clean" in argv or "repair" in argv):
        return "size-cap-data-loss"
    return None


def _known_crash(argv: list[str], env: dict, exc: BaseException) -> str | None:
    """The known open bug behind an escaped exception, if it is one."""
    if isinstance(exc, IsADirectoryError) and (
            {"--key", "--sign-key", "--trusted-keys"} & set(argv) or env.get("KERNELFORGE_TRUSTED_KEYS")):
        return "key-file-is-directory"
    if isinstance(exc, ValueError) and "empty name" in str(exc) and argv[:2] == ["key", "generate"]:
        return "key-generate-empty-path"
    return None


def check_result(argv: list[str], env: dict, result: Any, given_: str, seconds: float) -> str | None:
    """The outcome name; None if a known bug was hit (counted); AssertionError for a new problem."""
    exc = result.exception
    code = result.exit_code
    stderr = result.stderr if result.stderr_bytes is not None else ""
    if exc is not None and not isinstance(exc, SystemExit):
        bug = _known_crash(argv, env, exc)
        if bug:
            known(TARGET, bug, given_, seconds)
            return None
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(exc).__name__}: {exc}"))
    if "Traceback (most recent call last)" in result.output:
        raise AssertionError(problem(TARGET, "traceback", given_, result.output[-400:]))
    assert code in (0, 1, 2), problem(TARGET, "bad output", given_, f"exit code {code}: {result.output[-300:]}")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if code == 2 and set(argv) <= GROUPS and result.stdout.lstrip().startswith("Usage:"):
        return "help of a bare group"  # `kernelforge cache` shows the group's help (no_args_is_help)
    assert not (code == 2 and USAGE_BOX.search(stderr)), problem(
        TARGET, "wrong error", given_, f"a usage error printed typer's box, not one line: {stderr[-300:]!r}")
    if code == 2 and "validate" in argv[:2]:
        last = (result.output.strip().splitlines() or [""])[-1]
        assert last.startswith("validate: FAILED") or len(errors) == 1, problem(
            TARGET, "wrong error", given_, f"validate's exit 2 without its FAILED line: {result.output[-300:]}")
    elif code == 2:
        assert len(errors) == 1, problem(TARGET, "wrong error", given_,
                                         f"exit 2 with {len(errors)} error: lines; stderr: {stderr[-400:]!r}")
    assert len(errors) <= 1, problem(TARGET, "wrong error", given_, f"{len(errors)} error: lines: {errors[:3]}")
    json_out = _json_requested(argv)
    if json_out and code in (0, 1) and "--help" not in argv and "--version" not in argv and "-V" not in argv:
        if _check_json(argv, result, code, errors, given_):
            known(TARGET, "explain-negative-m", given_, seconds)
            return None
    return f"exit {code}"


def _json_requested(argv: list[str]) -> bool:
    fmts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--format"]
    return bool(fmts) and fmts[-1] == "json" and "--" not in argv


def _check_json(argv: list[str], result: Any, code: int, errors: list[str], given_: str) -> bool:
    """Check the JSON document; True if it fails only by a known bug (explain with M < 0)."""
    out = result.stdout.strip()
    if not out:
        assert code == 1 and errors, problem(TARGET, "bad output", given_,
                                             f"--format json, exit {code}, printed nothing on stdout")
        return False
    try:
        doc = json.loads(out)
    except ValueError:
        raise AssertionError(problem(TARGET, "bad output", given_, f"--format json printed non-JSON: {out[:300]!r}")) \
            from None
    try:
        import jsonschema

        from kernelforge.cli import json_schemas as js
    except ImportError:  # pragma: no cover
        return False
    kind = str(doc.get("schema", "")).removeprefix("kernelforge.")
    assert kind in js.KINDS, problem(TARGET, "bad output", given_, f"a JSON document without a known schema: {out[:200]}")
    errors_found = sorted(jsonschema.Draft202012Validator(js.schema(kind)).iter_errors(doc), key=str)
    if errors_found and kind == "explain_call" and isinstance(doc.get("m"), int) and doc["m"] < 0:
        return True
    assert not errors_found, problem(TARGET, "bad output", given_,
                                     f"{kind} does not validate: {errors_found[0].message[:300]}")
    return False


@corpus_settings(max_examples=400, deadline_s=40)
@given(case=command_lines())
def test_command_lines(template: Path, no_compiler: Any, case) -> None:
    run_case(template, *case)


@corpus_settings(max_examples=100, deadline_s=40)
@given(case=command_lines(mutate=True))
def test_mutated_command_lines(template: Path, no_compiler: Any, case) -> None:
    run_case(template, *case)
