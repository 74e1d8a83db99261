"""Bad input gets one `error:` line on stderr naming the argument (or file) and what was expected,
and the documented exit code; never a traceback, a hang or silent garbage. Also: output that is
not a terminal is never wrapped, `cache dir`, and `--dry-run` of the commands that change a cache
(merge, import, pull, push, clean) writing nothing."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cli import app
from tests.cli.test_cli_ux import RT_KEY, _publish

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def kf(*args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env={"COLUMNS": "80", **(env or {})})


def kf_process(*args: str, env: dict | None = None, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """The command in a fresh interpreter (`python -m kernelforge`), as a user runs it."""
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "kernelforge", *args], stderr=subprocess.PIPE, text=True, cwd=REPO,
                          env={**os.environ, "COLUMNS": "80", "KERNELFORGE_RECORD_USAGE": "0", **(env or {})},
                          timeout=timeout, **kw)


def assert_one_error_line(stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    for word in words:
        assert word in lines[0], (word, stderr)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under `root` (and root itself): its mode, size, mtime (a file created and removed
    again changes its directory's) and, for a file, the sha256 of its bytes; {} if root is missing."""
    if not root.exists():
        return {}
    out = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def caches(tmp_path: Path) -> tuple[CacheStore, CacheStore]:
    """(source, destination): the source holds a runtime library and two kernels; the destination
    the runtime library and one of the kernels with other bytes (a conflict)."""
    os.chmod(tmp_path, 0o755)
    src = CacheStore(tmp_path / "src")
    _publish(src, RT_KEY, kind="runtime")
    _publish(src, "a" * 64)
    _publish(src, "b" * 64, kclass="any")
    dst = CacheStore(tmp_path / "dst")
    _publish(dst, RT_KEY, kind="runtime")
    _publish(dst, "b" * 64, kclass="any", size=999)
    return src, dst


# ---- 1. one line instead of a traceback ----

def test_explain_on_an_untrusted_cache_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELFORGE_TRUST_SHARED_CACHE", raising=False)
    os.chmod(tmp_path, 0o755)
    root = tmp_path / "shared"
    (root / "v1").mkdir(parents=True)
    os.chmod(root, 0o775)  # group-writable: the runtime refuses it
    r = kf("explain", "quantize", "shape=128x256", "format=mxfp8", "dtype=bf16", "--cache", str(root))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, str(root), "writable by group", "cache repair")
    # a variant: not a HIT or MISS read from a cache the runtime refuses
    r = kf("explain", "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1", "--cache", str(root))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, str(root), "writable by group")


@pytest.fixture(scope="module")
def elf_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache `package` turns into a wheel: its runtime library and kernel are a real (tiny) ELF file."""
    from kernelforge.sources import source_hash
    from tests.cli.test_cli_ux import COORDS, KCLASSES

    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build a shared library")
    d = tmp_path_factory.mktemp("elf")
    os.chmod(d, 0o755)
    (d / "m.c").write_text("int kf_x(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(d / "m.so"), str(d / "m.c")], check=True)
    elf = (d / "m.so").read_bytes()

    def build_runtime(staging: Path) -> dict:
        name = f"libkfrt-{RT_KEY[:16]}.so"
        (staging / name).write_bytes(elf)
        return dict(kind="runtime", op="runtime", name=f"runtime-{RT_KEY[:12]}", variant={}, arch="host",
                    toolchain_id="tc", toolchain={}, source_hash="", main_file=name, build_time_s=0.0)

    def build_kernel(staging: Path) -> dict:
        (staging / "module.so").write_bytes(elf)
        axes = {**COORDS, "arch": "sm_90a", "kclass": "aligned", "threads": 128, "units_per_thread": 1}
        return dict(kind="kernel", op="quantize", name="quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1",
                    arch="sm_90a", toolchain_id="tc", toolchain={"x": 1},
                    variant={"axes": axes, "kclass": KCLASSES["aligned"], "op": "quantize"},
                    source_hash=source_hash("quantize"), main_file="module.so", build_time_s=0.0,
                    extra={"symbol": "kf_x", "runtime_key": RT_KEY, "dispatch": dict(COORDS)})

    store = CacheStore(d / "cache")
    store.get_or_build(RT_KEY, build_runtime)
    store.get_or_build("a" * 64, build_kernel)
    store.refresh_views()
    return store.root


def test_package_writes_into_a_directory(elf_cache: Path, tmp_path: Path) -> None:
    r = kf("package", "--cache", str(elf_cache), "--out", str(tmp_path / "dist"))
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "dist").glob("kernelforge_kernels_sm90a-*.whl"))) == 1


@pytest.mark.parametrize("where", ["a file", "under /proc", "immutable", "read-only"])
def test_package_out_that_cannot_take_wheels_is_one_line(elf_cache: Path, tmp_path: Path, where: str) -> None:
    out = tmp_path / "out"
    if where == "a file":
        out.write_text("not a directory")
    elif where == "under /proc":
        out = Path("/proc/kernelforge-test-out")
    elif where == "immutable":
        out.mkdir()
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)],
                                                            capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (needs root and a filesystem that supports it)")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a mode 555 directory (the immutable case covers root)")
        out.mkdir()
        out.chmod(0o555)
    try:
        r = kf("package", "--cache", str(elf_cache), "--out", str(out))
    finally:
        if where == "immutable":
            subprocess.run(["chattr", "-i", str(out)], check=True)
        elif where == "read-only":
            out.chmod(0o755)
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, f"--out {out}")
    if out.is_dir():
        assert list(out.iterdir()) == []


def test_export_to_a_directory_is_one_line(caches, tmp_path: Path) -> None:
    src, _ = caches
    target = tmp_path / "bundles"
    target.mkdir()
    r = kf("cache", "export", str(target), "--cache", str(src.root))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, f"bundle {target} is a directory")
    assert list(target.iterdir()) == []


def test_pull_from_a_host_that_does_not_resolve_is_one_line() -> None:
    start = time.monotonic()
    r = kf_process("cache", "pull", "ftp://nonexistent.invalid/y", "--cache", "/nonexistent/kf-cache")
    assert r.returncode == 2, r.stdout + r.stderr
    assert_one_error_line(r.stderr, "remote ftp://nonexistent.invalid/y")
    assert time.monotonic() - start < 30


@pytest.fixture
def silent_server():
    """A TCP port on the loopback that accepts connections and never sends a byte (a remote that hangs)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("scheme", ["ftp", "http"])
def test_a_remote_that_never_answers_fails_within_the_timeout(silent_server: int, scheme: str) -> None:
    """Without a bound, ftp waits 30 s then prints a traceback and http waits 5 minutes."""
    url = f"{scheme}://127.0.0.1:{silent_server}/store"
    start = time.monotonic()
    r = kf_process("cache", "pull", url, "--cache", "/nonexistent/kf-cache", env={"KERNELFORGE_REMOTE_TIMEOUT": "1"},
                   timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert_one_error_line(r.stderr, f"remote {url}")
    assert time.monotonic() - start < 20


def test_a_bad_remote_timeout_setting_is_one_line() -> None:
    r = kf("cache", "pull", "file:///nonexistent/kf-remote", env={"KERNELFORGE_REMOTE_TIMEOUT": "soon"})
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, "$KERNELFORGE_REMOTE_TIMEOUT='soon'")


def test_a_binary_spec_file_is_named(tmp_path: Path) -> None:
    spec = tmp_path / "binary.toml"
    spec.write_bytes(b"format = \xff\xfe\n")
    r = kf("specs", "show", "--spec", str(spec))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, str(spec), "not a UTF-8 text file")
    r = kf("specs", "show", env={"KERNELFORGE_SPEC_DIR": str(tmp_path)})
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, str(spec), "not a UTF-8 text file")
    r = kf("specs", "show", env={"KERNELFORGE_SPEC_DIR": str(spec)})  # a file where a directory belongs
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, "$KERNELFORGE_SPEC_DIR", "is not a directory")


def test_a_fifo_spec_file_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    r = kf_process("specs", "show", "--spec", str(fifo), timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert_one_error_line(r.stderr, str(fifo), "is not a regular file")  # it exists: not "does not exist"
    from kernelforge.errors import SpecError
    from kernelforge.spec.loader import load_spec

    with pytest.raises(SpecError, match="not a regular file"):  # the library never opens it either
        load_spec(fifo)


# ---- 2. values out of range are refused, not silently accepted ----

@pytest.mark.parametrize("args,words", [
    (["--shard", "1/99999999999999999999999"], ["--shard '1/99999999999999999999999'", "N <= 4096"]),
    (["--shard", "1/4097"], ["--shard '1/4097'"]),
    (["--shard", "\uff11/2"], ["--shard"]),
    (["--jobs", "99999999999999999999"], ["--jobs 99999999999999999999", "1 to 1024"]),
    (["--jobs", "0"], ["--jobs 0", "1 to 1024"]),
])
def test_build_bounds(tmp_path: Path, args: list[str], words: list[str]) -> None:
    r = kf("build", "--dry-run", "--cache", str(tmp_path / "c"), *args)
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, *words)
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("args,words", [
    (["--max-size", "\uff11\uff10G"], ["--max-size", "ASCII digits"]),
    (["--max-size", "9" * 400], ["--max-size", "out of range"]),
    (["--older-than", "999999999999999999d"], ["--older-than", "out of range"]),
    (["--older-than", "\uff13\uff10d"], ["--older-than", "ASCII digits"]),
    (["--older-than", "30"], ["--older-than", "age '30'", "add a unit", "30d"]),
])
def test_gc_refuses_sizes_and_ages_it_cannot_mean(caches, args: list[str], words: list[str]) -> None:
    src, _ = caches
    before = tree(src.root)
    r = kf("cache", "gc", "--cache", str(src.root), *args)
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, *words)
    assert tree(src.root) == before


def test_gc_ages_with_units_still_work(caches) -> None:
    src, _ = caches
    for age in ("30d", "12h", "45m", "90s", "2w"):
        r = kf("cache", "gc", "--cache", str(src.root), "--older-than", age, "--dry-run")
        assert r.exit_code == 0, (age, r.output)


# ---- 3. conventions: one line, never wrapped when not a terminal ----

def test_cache_limit_error_is_one_line(tmp_path: Path) -> None:
    r = kf("cache", "limit", "1Q", "--cache", str(tmp_path))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, "size '1Q'", "1.5GiB")


@pytest.mark.parametrize("wide", [False, True])
def test_specs_show_into_a_file_is_never_wrapped(tmp_path: Path, wide: bool) -> None:
    variants = json.loads(kf("specs", "show", "--format", "json").stdout)["variants"]
    out = tmp_path / "specs.txt"
    with open(out, "w") as f:
        r = kf_process("specs", "show", *(["--wide"] if wide else []), stdout=f)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    if wide:  # every variant name whole, one row each
        names = {v["name"] for v in variants}
        rows = [line for line in lines if line.strip("│ ").split(" ")[0] in names]
        assert len(rows) == len(names), "\n".join(lines[:20])
    else:  # one row per (spec file, op, arch), with every axis value on it
        groups = {(v["spec_file"], v["op"], v["axes"]["arch"]) for v in variants}
        assert len(lines) == 1 + len(groups) + 1, "\n".join(lines[:20])  # header, rows, the count line
        for v in variants:
            row = next(line for line in lines if line.split()[:2] == [v["op"], v["axes"]["arch"]])
            for axis, value in v["axes"].items():
                if axis not in ("arch", "kclass"):
                    assert f"{axis}=" in row and str(value) in row, (row, axis, value)


# ---- 4. cache dir ----

def test_cache_dir_prints_the_root_even_before_it_exists(tmp_path: Path) -> None:
    root = tmp_path / "not-yet"
    r = kf("cache", "dir", "--cache", str(root))
    assert r.exit_code == 0, r.output
    assert r.stdout == f"{root}\n"
    r = kf("cache", "dir", env={"KERNELFORGE_CACHE_DIR": str(root)})
    assert r.exit_code == 0 and r.stdout == f"{root}\n", r.output
    r = kf("cache", "dir", "--format", "json", env={"KERNELFORGE_CACHE_DIR": str(root)})
    data = json.loads(r.stdout)
    assert data["root"] == str(root) and data["root_source"] == "$KERNELFORGE_CACHE_DIR"
    assert not root.exists()


# ---- 5. --dry-run writes nothing ----

def test_merge_dry_run_writes_nothing(caches, tmp_path: Path) -> None:
    src, dst = caches
    before = tree(dst.root)
    r = kf("cache", "merge", "--dry-run", str(src.root), "--cache", str(dst.root))
    assert r.exit_code == 1, r.output  # the conflict is found, as the merge would find it
    assert "CONFLICT" in r.stdout and "would merge quantize.mxfp8.floor.linear.bfloat16.aligned" in r.stdout
    assert "dry run: would merge 1, identical 1, conflicts 1" in r.stdout, r.stdout
    assert tree(dst.root) == before
    fresh = tmp_path / "fresh"
    r = kf("cache", "merge", "--dry-run", str(src.root), "--cache", str(fresh), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["merged"] == 3
    assert not fresh.exists()
    r = kf("cache", "merge", str(src.root), "--cache", str(fresh))  # what the dry run said
    assert r.exit_code == 0 and "merged 3," in r.stdout, r.output


def test_merge_dry_run_checks_signatures_and_files(caches, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, _ = caches
    fresh = tmp_path / "fresh"
    monkeypatch.delenv("KERNELFORGE_ALLOW_UNSIGNED", raising=False)
    monkeypatch.delenv("KERNELFORGE_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    r = kf("cache", "merge", "--dry-run", str(src.root), "--cache", str(fresh))
    assert r.exit_code == 1, r.output
    assert r.stdout.count("not signed by a trusted key") == 3, r.stdout
    monkeypatch.setenv("KERNELFORGE_ALLOW_UNSIGNED", "*")
    entry = src.index()["a" * 64]
    (src.entry_dir(entry) / "module.so").write_bytes(b"x" * 1000)  # damaged in the source
    r = kf("cache", "merge", "--dry-run", str(src.root), "--cache", str(fresh))
    assert r.exit_code == 1 and "does not match its recorded sha256" in r.stdout, r.output
    assert not fresh.exists()


def test_import_dry_run_writes_nothing(caches, tmp_path: Path) -> None:
    src, dst = caches
    bundle = tmp_path / "b.tar.gz"
    assert kf("cache", "export", str(bundle), "--cache", str(src.root)).exit_code == 0
    before = tree(dst.root)
    r = kf("cache", "import", "--dry-run", "--verify", str(bundle), "--cache", str(dst.root))
    assert r.exit_code == 1, r.output
    assert "CONFLICT" in r.stdout and "would go to quarantine/" in r.stdout
    assert "would import quantize.mxfp8.floor.linear.bfloat16.aligned" in r.stdout
    assert "1 entries would be transferred" in r.stdout, r.stdout
    assert tree(dst.root) == before
    fresh = tmp_path / "fresh"
    r = kf("cache", "import", "--dry-run", str(bundle), "--cache", str(fresh), "--format", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["transferred"]) == 3, r.output
    assert not fresh.exists()


def test_push_and_pull_dry_runs_write_nothing(caches, tmp_path: Path) -> None:
    src, dst = caches
    remote = tmp_path / "remote"
    r = kf("cache", "push", "--dry-run", remote.as_uri(), "--cache", str(src.root))
    assert r.exit_code == 0, r.output
    assert "3 entries would be transferred (3 file(s), 3000 bytes)" in r.stdout, r.stdout
    assert not remote.exists()
    assert kf("cache", "push", remote.as_uri(), "--cache", str(src.root)).exit_code == 0
    _publish(src, "c" * 64, arch="sm_100a")
    remote_before = tree(remote)
    r = kf("cache", "push", "--dry-run", remote.as_uri(), "--cache", str(src.root))
    assert r.exit_code == 0 and "would push quantize.mxfp8.floor.linear.bfloat16.aligned.sm_100a" in r.stdout, r.output
    assert tree(remote) == remote_before
    before = tree(dst.root)
    r = kf("cache", "pull", "--dry-run", remote.as_uri(), "--cache", str(dst.root))
    assert r.exit_code == 1, r.output  # the conflict
    assert "would pull quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a" in r.stdout, r.stdout
    assert tree(dst.root) == before and tree(remote) == remote_before


def test_clean_dry_run_writes_nothing(caches) -> None:
    src, _ = caches
    (src.layout.artifacts / "ab" / ("ab" * 32)).mkdir(parents=True)  # debris: no meta.json
    before = tree(src.root)
    r = kf("cache", "clean", "--dry-run", "--all", "--cache", str(src.root))
    assert r.exit_code == 0, r.output
    assert "dry run: would remove 3 entries" in r.stdout and "1 orphan dirs" in r.stdout, r.stdout
    assert "would remove runtime-" in r.stdout
    assert tree(src.root) == before
    r = kf("cache", "clean", "--dry-run", "--all", "--cache", str(src.root), "--format", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["removed"]) == 3, r.output
    assert tree(src.root) == before


@pytest.mark.parametrize("command", ["merge", "import", "pull"])
def test_a_file_as_the_cache_root_is_one_line(caches, tmp_path: Path, command: str) -> None:
    """A dry run may look at a cache it cannot write, never at a path that cannot be a cache."""
    src, _ = caches
    root = tmp_path / "a-file"
    root.write_text("not a cache")
    source = {"merge": str(src.root), "import": str(tmp_path / "b.tar.gz"), "pull": (tmp_path / "r").as_uri()}
    r = kf("cache", command, "--dry-run", source[command], "--cache", str(root))
    assert r.exit_code == 2, r.output
    assert_one_error_line(r.stderr, f"cache root {root}", "is not a directory")
    assert root.read_text() == "not a cache"
