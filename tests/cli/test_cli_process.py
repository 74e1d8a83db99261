"""The `kernelforge` command as a process: what `--version`, `--help` and `cache ls` import, and a
reader that closes the pipe early (`kernelforge cache ls | head -1` under `set -o pipefail`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from tests.cli.test_cli_ux import _publish

REPO = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "numpy", "cutlass", "tvm_ffi", "fsspec", "cuda"}

# Runs the console script's main() in a fresh interpreter, then reports its exit code and which
# heavy top-level packages it imported (on stderr: stdout belongs to the command).
CHILD = """
import json, sys
from kernelforge.cli import main
watched = set(json.loads(sys.argv[2]))
sys.argv = ["kernelforge", *json.loads(sys.argv[1])]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & watched)
sys.stderr.write("CHILD " + json.dumps([code, heavy]) + "\\n")
"""


def _env(**extra: str) -> dict:
    return {**os.environ, "COLUMNS": "80", "KERNELFORGE_RECORD_USAGE": "0", **extra}


@pytest.fixture(scope="module")
def many_entries(tmp_path_factory) -> Path:
    """A crafted cache whose `cache ls` prints well over one pipe buffer (4 KiB, set below)."""
    store = CacheStore(tmp_path_factory.mktemp("many") / "cache")
    for i in range(60):
        _publish(store, f"{i:02d}".ljust(64, "e"), threads=128 + i)
    store.refresh_views()
    return store.root


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["cache", "ls", "--cache", "{cache}"]])
def test_version_help_and_ls_import_no_torch(args, many_entries):
    args = [a.replace("{cache}", str(many_entries)) for a in args]
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args), json.dumps(sorted(HEAVY))],
                       capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    report = [line for line in r.stderr.splitlines() if line.startswith("CHILD ")]
    assert report, r.stderr
    code, heavy = json.loads(report[-1][len("CHILD "):])
    assert code == 0, r.stdout + r.stderr
    assert heavy == [], f"`kernelforge {' '.join(args)}` imported {heavy}"
    if args == ["--version"]:
        assert "kernelforge " in r.stdout and "local GPU: " in r.stdout, r.stdout


@pytest.mark.parametrize("args", [["build", "--help"], ["cache", "ls", "--cache", "{cache}"]])
def test_a_closed_pipe_ends_the_command_quietly_with_exit_0(args, many_entries):
    """`set -o pipefail; kernelforge cache ls | head -1`: the reader takes one line and closes the
    pipe while the command is still writing; the command's own status is 0 and stderr is empty."""
    fcntl = pytest.importorskip("fcntl")
    args = [a.replace("{cache}", str(many_entries)) for a in args]
    rfd, wfd = os.pipe()
    try:
        if hasattr(fcntl, "F_SETPIPE_SZ"):
            fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, 4096)  # the output below is larger: the writer blocks
        proc = subprocess.Popen([sys.executable, "-m", "kernelforge", *args], stdout=wfd, stderr=subprocess.PIPE,
                                env=_env(), cwd=REPO)
    finally:
        os.close(wfd)
    line = b""
    try:
        while not line.endswith(b"\n"):  # unbuffered: read exactly one line, as `head -1` prints it
            byte = os.read(rfd, 1)
            if not byte:
                break
            line += byte
    finally:
        os.close(rfd)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    code = proc.wait(timeout=120)
    assert line.endswith(b"\n"), f"the command printed no whole line: {line!r}"
    assert code == 0, f"exit {code}; stderr: {err}"
    assert err == "", err
