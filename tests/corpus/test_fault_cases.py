"""Fixed fault cases: a cache whose entry's meta.json is a FIFO, a 0-byte index, a symlinked module,
and a binary (not UTF-8) or FIFO spec file, each run through the commands that read them; plus one
xfail(strict=True) case per known open bug the generated corpus tolerates (tests/corpus/_corpus.py
KNOWN_BUGS): when a bug is fixed its case passes, fails as XPASS, and its entry and mark go.

Each case: exit code 0, 1 or 2, no traceback, no hang (a time limit), one `error:` line on exit 2;
`cache verify` finds the damage (exit 1) and `cache repair` leaves a cache that verifies."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import app
from kernelforge.errors import SpecError
from tests.cli._crafted import crafted_cache
from tests.corpus._corpus import KNOWN_BUGS, Hang, count, problem, time_limit

# Hostile inputs make the product warn (an unreadable index, ...): expected here, not reported.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = "fault_cases"
REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
KEY = "a" * 64  # the crafted kernel the faults damage


def _fifo_meta(store: CacheStore) -> None:
    meta = store.entry_dir(store.index()[KEY]) / "meta.json"
    meta.unlink()
    os.mkfifo(meta)


def _empty_index(store: CacheStore) -> None:
    (store.root / "v1" / "index.json").write_bytes(b"")


def _symlinked_module(store: CacheStore) -> None:
    module = store.entry_dir(store.index()[KEY]) / "module.so"
    real = store.root.parent / "elsewhere.so"
    real.write_bytes(module.read_bytes())
    module.unlink()
    module.symlink_to(real)


FAULTS: dict[str, Callable[[CacheStore], None]] = {
    "fifo meta.json": _fifo_meta, "0-byte index": _empty_index, "symlinked module": _symlinked_module}
COMMANDS = {
    "ls": ["cache", "ls"], "ls json": ["cache", "ls", "--format", "json"], "stats": ["cache", "stats"],
    "verify": ["cache", "verify"], "clean": ["cache", "clean"], "gc": ["cache", "gc", "--max-size", "1G", "--dry-run"],
    "export": ["cache", "export", "{tmp}/b.tar.gz"], "merge from": ["cache", "merge", "{root}", "--cache", "{tmp}/dest",
                                                                     "--allow-unsigned"],
    "explain": ["explain", "quantize", "shape=128x8000", "format=mxfp8", "dtype=bf16"],
    "build dry run": ["build", "--dry-run", "--only", "quantize.mxfp8.floor.linear.bfloat16.*.sm_90a.t128u1"],
    "validate --no-tests": ["validate", "--no-tests"],
}


def invoke(args: list[str], env: dict[str, str] | None = None, given_: str = "", seconds: float = 20):
    """Run a command line; fail on a hang, a traceback, an escaped exception or a bad exit."""
    t0 = time.monotonic()
    try:
        with time_limit(seconds):
            r = runner.invoke(app, args, env={"COLUMNS": "200", **(env or {})})
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(r.exception).__name__}: {r.exception}"))
    assert "Traceback (most recent call last)" not in r.output, problem(TARGET, "traceback", given_, r.output[-300:])
    assert r.exit_code in (0, 1, 2), problem(TARGET, "bad output", given_, f"exit {r.exit_code}")
    if r.exit_code == 2 and args[0] != "validate":
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, problem(TARGET, "wrong error", given_, f"exit 2 stderr: {r.stderr[-300:]!r}")
    count(TARGET, f"exit {r.exit_code}", time.monotonic() - t0)
    return r


@pytest.fixture
def damaged(tmp_path: Path, request: pytest.FixtureRequest):
    os.chmod(tmp_path, 0o755)
    store = crafted_cache(tmp_path / "c" / "cache")
    FAULTS[request.param](store)
    return tmp_path, store


@pytest.mark.parametrize("damaged", list(FAULTS), indirect=True)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_commands_on_a_damaged_cache(damaged, command: str) -> None:
    tmp, store = damaged
    args = [a.replace("{tmp}", str(tmp)).replace("{root}", str(store.root)) for a in COMMANDS[command]]
    if "--cache" not in args:
        args += ["--cache", str(store.root)]
    r = invoke(args, {"KERNELFORGE_CACHE_DIR": str(store.root)}, " ".join(COMMANDS[command]))
    if command == "verify":
        assert r.exit_code == 1, r.output


@pytest.mark.parametrize("damaged", list(FAULTS), indirect=True)
def test_repair_leaves_a_cache_that_verifies(damaged) -> None:
    tmp, store = damaged
    root = str(store.root)
    invoke(["cache", "repair", "--cache", root], given_="cache repair")
    r = invoke(["cache", "verify", "--cache", root], given_="cache repair; cache verify")
    assert r.exit_code == 0, r.output
    survivors = set(CacheStore(root).index(fresh=True))
    assert {"b" * 64, "c" * 64, "d" * 64, "r" * 64} <= survivors  # the undamaged entries stay


# ---- the same faults through the console script, as users run it ----

@pytest.mark.parametrize("damaged", list(FAULTS), indirect=True)
def test_the_console_script_on_a_damaged_cache(damaged) -> None:
    """`python -m kernelforge cache verify` in a real process (a subprocess timeout instead of the alarm)."""
    import subprocess
    import sys

    tmp, store = damaged
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelforge", "cache", "verify", "--cache", str(store.root)],
                              capture_output=True, text=True, timeout=60, cwd=REPO,
                              env={**os.environ, "KERNELFORGE_CACHE_DIR": str(store.root)})
    except subprocess.TimeoutExpired:
        raise AssertionError(problem(TARGET, "hang", "python -m kernelforge cache verify", "over 60 s")) from None
    assert "Traceback" not in proc.stderr + proc.stdout, problem(TARGET, "traceback", "cache verify", proc.stderr)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    count(TARGET, "exit 1 (subprocess)", time.monotonic() - t0)


# ---- a binary spec ----

BINARY_SPEC = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"


@pytest.mark.parametrize("kind", ["binary", "fifo"])
@pytest.mark.parametrize("args", [["specs", "show"], ["build", "--dry-run"], ["explain", "quantize.*"]],
                         ids=["specs show", "build --dry-run", "explain"])
def test_binary_spec_file_is_one_error_line(tmp_path: Path, args: list[str], kind: str) -> None:
    spec = tmp_path / "spec.toml"
    if kind == "fifo":
        os.mkfifo(spec)
    else:
        spec.write_bytes(BINARY_SPEC)
    cache = [] if args[0] == "specs" else ["--cache", str(crafted_cache(tmp_path / "c" / "cache").root)]
    r = invoke([*args, "--spec", str(spec), *cache], given_=" ".join(args) + f" --spec {kind.upper()}")
    assert r.exit_code == 2 and str(spec) in r.stderr, r.output


def test_binary_spec_raises_spec_error(tmp_path: Path) -> None:
    spec = tmp_path / "binary.toml"
    spec.write_bytes(BINARY_SPEC)
    from kernelforge.spec import load_spec

    with pytest.raises(SpecError, match=str(spec)):
        load_spec(spec)


# ---- the known open bugs the generated corpus tolerates, one strict xfail each ----

def _fresh() -> tuple[Path, CacheStore]:
    tmp = Path(tempfile.mkdtemp(prefix="kf-corpus-fault-"))
    os.chmod(tmp, 0o755)
    return tmp, crafted_cache(tmp / "c" / "cache")


def _bug(bug: str):
    return pytest.mark.xfail(strict=True, reason=f"[{bug}] {KNOWN_BUGS[bug]}")


@pytest.mark.parametrize("args", [["cache", "ls", "--bogus"], ["build", "--jobs", "x"], ["cache", "gc", "--max-size"],
                                  ["explain"], ["cache", "ls", "--format", "yaml"]])
def test_usage_error_is_one_line(args: list[str]) -> None:
    r = invoke(args, given_=" ".join(args))
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("error:")


def _one_error_line(args: list[str], env: dict[str, str] | None = None) -> None:
    """The command ends with exit 2 and one `error:` line, no traceback."""
    r = runner.invoke(app, args, env={"COLUMNS": "200", **(env or {})})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2 and [ln for ln in r.stderr.splitlines() if ln.startswith("error:")], r.output


@pytest.mark.parametrize("args", [["cache", "sign", "--key", "{dir}"], ["package", "--sign-key", "{dir}"],
                                  ["cache", "merge", "{root}", "--trusted-keys", "{dir}"]],
                         ids=["cache sign --key", "package --sign-key", "merge --trusted-keys"])
def test_a_key_file_that_is_a_directory_is_one_error_line(args: list[str]) -> None:
    tmp, store = _fresh()
    try:
        (tmp / "dir").mkdir()
        _one_error_line([a.replace("{dir}", str(tmp / "dir")).replace("{root}", str(store.root)) for a in args]
                        + ["--cache", str(store.root)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_key_generate_with_an_empty_path_is_one_error_line() -> None:
    tmp, _ = _fresh()
    cwd = os.getcwd()
    try:
        os.chdir(tmp)
        _one_error_line(["key", "generate", ""])
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)


def test_export_never_writes_over_the_cache_it_exports() -> None:
    tmp, store = _fresh()
    try:
        before = set(store.index(fresh=True))
        runner.invoke(app, ["cache", "export", str(store.root / "v1" / "index.json"), "--cache", str(store.root)])
        assert set(CacheStore(store.root).index(fresh=True)) == before
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("command", ["clean", "repair"])
@pytest.mark.parametrize("cap", ["KERNELFORGE_MAX_INDEX_BYTES", "KERNELFORGE_MAX_ARTIFACT_BYTES"])
def test_a_small_size_cap_never_loses_entries(command: str, cap: str) -> None:
    tmp, store = _fresh()
    try:
        before = {k: e.files for k, e in store.index(fresh=True).items()}
        runner.invoke(app, ["cache", command, "--cache", str(store.root)], env={cap: "10"})
        after = CacheStore(store.root)
        kept = {k: e.files for k, e in after.index(fresh=True).items()}
        assert kept == before and all((after.entry_dir(e) / e.main_file).is_file()
                                      for e in after.index(fresh=True).values())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("arg", ["m=-5", "align=0", "stride=-3"])
def test_explain_refuses_impossible_calls(arg: str) -> None:
    tmp, store = _fresh()
    try:
        call = ["m=128", "k=64", arg] if arg != "m=-5" else ["k=64", arg]
        _one_error_line(["explain", "quantize", *call, "format=mxfp8", "dtype=bf16", "--cache", str(store.root)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("shape", [(0,), (2, 3, 0)])
def test_quantize_with_k_zero_is_a_value_error(shape: tuple[int, ...]) -> None:
    torch = pytest.importorskip("torch")
    import kernelforge

    with pytest.raises(ValueError):
        kernelforge.quantize(torch.zeros(shape, dtype=torch.bfloat16), "mxfp8")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "complex64"])
def test_group_offsets_valid_checks_the_dtype(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    import kernelforge

    with pytest.raises((ValueError, TypeError)):
        kernelforge.group_offsets_valid(torch.zeros(2, dtype=getattr(torch, dtype)), 4)
