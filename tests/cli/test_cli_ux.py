"""CLI behaviour a user relies on, on crafted caches (no compiler): progress lines, exit codes,
plain error text, explain's verdicts, gc's LRU order and its runtime-library rule, usage records,
json reports, --version."""
from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelforge.cache import CacheStore
from kernelforge.cache.maintenance.usage_summary import read_usage
from kernelforge.cli import app
from kernelforge.sources import source_hash

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
KCLASSES = {"aligned": {"cluster": 1, "elements": 0, "k_multiple_blocks": 4, "max_k": 0, "name": "aligned",
                        "vector_bytes": 16},
            "any": {"cluster": 1, "elements": 0, "k_multiple_blocks": 1, "max_k": 0, "name": "any",
                    "vector_bytes": 0}}
RT_KEY = "r" * 64


def _publish(store: CacheStore, key: str, *, kind: str = "kernel", kclass: str = "aligned", arch: str = "sm_90a",
             src: str | None = None, size: int = 1000, threads: int = 128, runtime_key: str = RT_KEY) -> None:
    def build(staging: Path) -> dict:
        name = "libkfrt-" + key[:16] + ".so" if kind == "runtime" else "module.so"
        (staging / name).write_bytes(key.encode()[:1] * size)
        if kind == "runtime":
            return dict(kind="runtime", op="runtime", name=f"runtime-{key[:12]}", variant={}, arch="host",
                        toolchain_id="tc", toolchain={}, source_hash="", main_file=name, build_time_s=0.0)
        vname = f"quantize.mxfp8.floor.linear.bfloat16.{kclass}.{arch}.t{threads}u1"
        axes = {**COORDS, "arch": arch, "kclass": kclass, "threads": threads, "units_per_thread": 1}
        return dict(kind="kernel", op="quantize", name=vname, arch=arch, toolchain_id="tc", toolchain={"x": 1},
                    variant={"axes": axes, "kclass": KCLASSES[kclass], "op": "quantize"},
                    source_hash=source_hash("quantize") if src is None else src, main_file="module.so",
                    build_time_s=0.0, extra={"symbol": "kf_x", "runtime_key": runtime_key, "dispatch": dict(COORDS)})
    store.get_or_build(key, build)


@pytest.fixture
def crafted(tmp_path: Path) -> CacheStore:
    """A fake cache: a runtime library, aligned/any builds for sm_90a, one sm_100a, one stale build."""
    os.chmod(tmp_path, 0o755)
    store = CacheStore(tmp_path / "cache")
    _publish(store, RT_KEY, kind="runtime", size=50_000)
    _publish(store, "a" * 64, kclass="aligned")
    _publish(store, "b" * 64, kclass="any")
    _publish(store, "c" * 64, kclass="aligned", arch="sm_100a")
    _publish(store, "d" * 64, kclass="aligned", threads=256, src="0" * 64)
    store.refresh_views()
    return store


def kf(*args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


# ---- 1. build output in a log ----

def test_line_reporter_prints_within_the_period_and_every_10_percent():
    from kernelforge.cli.progress import LineReporter

    out = io.StringIO()
    rep = LineReporter(out, interval=0.1)
    rep.start(20)
    rep.begin("v0")
    time.sleep(0.35)
    timed = [line for line in out.getvalue().splitlines() if line.startswith("progress:")]
    assert len(timed) >= 2, out.getvalue()  # a slow compile still shows the build alive
    assert "0/20 variants (0%)" in timed[0] and "compiling v0" in timed[0] and "ETA" in timed[0]
    rep.done("v0", False)
    rep.done("v1", True)
    rep.stop()
    lines = out.getvalue().splitlines()
    assert any("2/20 variants (10%)" in line and "1 failed" in line for line in lines), lines
    assert all(len(line) < 400 and "\n" not in line for line in lines)


# ---- 5. exit codes and plain error text ----

@pytest.mark.parametrize("args,code,text", [
    (["specs", "show", "--only", "nothing*"], 2, "no variant name matches --only 'nothing*'"),
    (["build", "--only", "nothing*", "--cache", "{tmp}"], 2, "no variant name matches --only 'nothing*'"),
    (["build", "--arch", "sm_90", "--cache", "{tmp}"], 2, "did you mean sm_90a?"),
    (["specs", "show", "--arch", "sm_120a"], 2, "no selected spec declares arch 'sm_120a': the selected spec file(s) declare sm_100a, sm_90a"),
    (["cache", "gc", "--cache", "{tmp}"], 2, "nothing to do"),
    (["cache", "gc", "--cache", "{tmp}", "--max-size", "12 bananas"], 2, "size '12 bananas'"),
    (["explain", "quantize", "shape=1x64", "format=nope", "--cache", "{tmp}"], 2, "format=nope"),
    (["explain", "nothing.like.this", "--cache", "{tmp}"], 2, "no variant is named"),
])
def test_user_errors_exit_2(tmp_path, args, code, text):
    r = kf(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == code, r.output
    assert text in r.stderr, r.stderr
    assert "Traceback" not in r.output


def test_build_errors_keep_brackets(tmp_path):
    spec = REPO / "specs" / "quantize.toml"
    bad = tmp_path / "badvalue.toml"
    bad.write_text(spec.read_text().replace('format = ["mxfp8"', 'format = ["mxfp9"', 1)
                   if 'format = ["mxfp8"' in spec.read_text() else spec.read_text().replace("mxfp8", "mxfp9", 1))
    r = kf("build", "--spec", str(bad), "--cache", str(tmp_path / "c"))
    assert r.exit_code == 2, r.output
    assert "[axes]" in r.stderr and "badvalue.toml:" in r.stderr, r.stderr  # no rich markup eats the table name


def test_help_documents_exit_codes_and_completion():
    r = kf("--help")
    assert r.exit_code == 0 and "Exit codes" in r.stdout and "--install-completion" in r.stdout
    assert "explain" in r.stdout
    r = kf("--version")
    assert r.exit_code == 0
    for word in ("kernelforge 0.", "toolchain:", "tvm-ffi ABI:", "default cache root:", "local GPU:"):
        assert word in r.stdout, r.stdout


def _on_a_terminal(*args: str, columns: int) -> str:
    """stdout of `kernelforge ARGS` run on a pseudo-terminal `columns` wide (output that is not a
    terminal is never wrapped, so only a terminal shows the fitting)."""
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "KERNELFORGE_RECORD_USAGE": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "kernelforge", *args], stdout=slave, stderr=subprocess.PIPE,
                            cwd=REPO, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode().replace("\r\n", "\n"))  # styles: not text


def test_specs_show_fits_a_terminal():
    out = _on_a_terminal("specs", "show", columns=100)
    assert "variants from" in out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    wide = kf("specs", "show", "--wide", "--only", "quantize.mxfp8.floor.linear.bfloat16.*")
    assert "units_per_thread" in wide.stdout and "k_multiple_blocks" in wide.stdout


# ---- 2. explain ----

def test_explain_call_names_each_rejection(crafted):
    r = kf("explain", "quantize", "shape=128x8000", "format=mxfp8", "dtype=bf16", "--cache", str(crafted.root),
           "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    by_key = {c["key"][:1]: c for c in data["candidates"]}
    assert by_key["a"]["status"] == "rejected" and "K = 8000 is not a multiple of 4 block(s)" in by_key["a"]["why"]
    assert by_key["b"]["status"] == "chosen" and "heuristic" in by_key["b"]["why"]
    assert by_key["c"]["status"] == "rejected" and "arch: sm_100a does not run on capability 9.0" in by_key["c"]["why"]
    assert by_key["d"]["status"] == "rejected" and "other kernel sources" in by_key["d"]["why"]
    r = kf("explain", "quantize", "shape=128x7168", "format=mxfp8", "dtype=bf16", "align=8", "--cache",
           str(crafted.root))
    assert r.exit_code == 0
    assert "alignment: the pointer is 8-byte aligned, it needs 16" in r.stdout
    r = kf("explain", "quantize", "shape=128x7168", "format=mxfp8", "dtype=float16", "--cache", str(crafted.root))
    assert r.exit_code == 1
    assert "MISS" in r.stdout and "dtype: bfloat16 (cached) vs float16" in r.stdout
    assert "kernelforge build --cache" in r.stdout and "--arch sm_90a --only 'quantize.mxfp8.floor.linear.float16." in r.stdout


def test_explain_names_the_staged_linear_scales(tmp_path):
    """A columnwise call whose linear scales the op stages (kernelforge/staging.py) is explained
    as what runs: the swizzled build, with a note; a smaller call is explained as linear."""
    os.chmod(tmp_path, 0o755)
    store = CacheStore(tmp_path / "cache")
    _publish(store, RT_KEY, kind="runtime", size=50_000)
    coords = {"format": "mxfp8", "scale_mode": "floor", "layout": "swizzled", "dtype": "bfloat16",
              "outputs": "dual", "transform": "none"}

    def build(staging: Path) -> dict:
        (staging / "module.so").write_bytes(b"s" * 1000)
        kclass = {**KCLASSES["any"], "name": "edge", "m_multiple": 0}
        return dict(kind="kernel", op="quantize_columnwise", name="quantize_columnwise.mxfp8.floor.swizzled.bfloat16."
                    "dual.none.edge.sm_90a", arch="sm_90a", toolchain_id="tc", toolchain={"x": 1},
                    variant={"axes": {**coords, "arch": "sm_90a", "kclass": "edge"}, "kclass": kclass,
                             "op": "quantize_columnwise"},
                    source_hash=source_hash("quantize_columnwise"), main_file="module.so", build_time_s=0.0,
                    extra={"symbol": "kf_s", "runtime_key": RT_KEY, "dispatch": dict(coords)})

    store.get_or_build("s" * 64, build)
    store.refresh_views()
    call = ("explain", "quantize_columnwise", "format=mxfp8", "dtype=bf16", "outputs=dual", "transform=none",
            "--cache", str(store.root))
    r = kf(*call, "shape=16384x8192", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert "scale_layout pass" in data["staged"] and data["chosen"]["name"].startswith(
        "quantize_columnwise.mxfp8.floor.swizzled."), data
    r = kf(*call, "shape=1024x1024")
    assert r.exit_code == 1 and "layout=linear" in r.stdout and "note:" not in r.stdout, r.stdout
    # A card whose tuning table measured the rule: explained by that rule when the device is named.
    from kernelforge.build.tables import publish_table
    from kernelforge.runtime.tuning import M_BUCKETS, SCHEMA

    publish_table(store, {"schema": SCHEMA, "device": "NVIDIA H200", "arch": "sm_90a", "m_buckets": list(M_BUCKETS),
                          "created": "2026-11-28T00:00:00+00:00", "choices": {},
                          "sources": {op: source_hash(op) for op in ("quantize_columnwise", "scale_layout")},
                          "staging": {"min_elements": {"mxfp8.dual": None}}})
    r = kf(*call, "shape=16384x8192", "device=NVIDIA H200")
    assert r.exit_code == 1 and "layout=linear" in r.stdout and "note:" not in r.stdout, r.stdout
    r = kf(*call, "shape=16384x8192", "device=NVIDIA H100 80GB HBM3")  # no table of that card: the shipped rule
    assert r.exit_code == 0 and "note: linear scales are staged at this shape (the shipped rule" in r.stdout, r.stdout


def test_key_diff_names_the_changed_ingredient(crafted):
    from kernelforge.cache.maintenance.keydiff import miss_reason

    entries = list(crafted.index().values())
    name = "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1"
    canonical = dict(crafted.index()["a" * 64].variant)
    why = miss_reason(entries, name, "quantize", "sm_90a", canonical, "f" * 64, {"x": 2})
    assert "kernel sources of quantize changed" in why and "toolchain x: 1 -> 2" in why, why


# ---- 3. gc, usage records, stats ----

def _use(store: CacheStore, key: str, ts: int) -> None:
    d = store.layout.schema_root / "usage"
    d.mkdir(exist_ok=True)
    with open(d / f"otherhost-1-{key[:4]}.log", "a") as f:
        f.write(f"{ts} load quantize {key}\n")


def test_gc_lru_order_keeps_linked_runtime(crafted):
    now = int(time.time())
    _use(crafted, "a" * 64, now + 300)  # most recently used
    _use(crafted, "b" * 64, now + 100)
    _use(crafted, "c" * 64, now + 200)
    # "d" has no record: its build time (now) is its last use, the oldest
    order = json.loads(kf("cache", "gc", "--cache", str(crafted.root), "--max-size", "1", "--dry-run",
                          "--format", "json").stdout)["removed"]
    assert [x["key"][:1] for x in order if x["kind"] == "kernel"] == ["d", "b", "c", "a"], order
    assert [x["kind"] for x in order][-1] == "runtime"  # only once no kept kernel links it
    assert len(crafted.index(fresh=True)) == 5  # a dry run removes nothing
    total = json.loads(kf("cache", "stats", "--cache", str(crafted.root), "--format", "json").stdout)["tree_bytes"]
    r = kf("cache", "gc", "--cache", str(crafted.root), "--max-size", str(total - 1500), "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [x["key"][:1] for x in data["removed"]] == ["d"], data  # least recently used first, just enough
    assert data["bytes_after"] <= total - 1500
    keys = set(crafted.index(fresh=True))
    assert RT_KEY in keys and {"a" * 64, "b" * 64, "c" * 64} <= keys
    r = kf("cache", "gc", "--cache", str(crafted.root), "--max-size", "60K", "--format", "json")
    data = json.loads(r.stdout)
    remaining = crafted.index(fresh=True)
    # the runtime library goes exactly when the last kernel linking it goes
    assert (RT_KEY in remaining) == any(e.kind == "kernel" for e in remaining.values()), data


def test_gc_older_than(crafted):
    r = kf("cache", "gc", "--cache", str(crafted.root), "--older-than", "1h", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"] == []  # everything was built just now
    _use(crafted, "a" * 64, int(time.time()) + 7200)  # used "later": the others are older than 1h by then
    r = kf("cache", "gc", "--cache", str(crafted.root), "--older-than", "0s", "--format", "json")
    removed = {x["key"][:1] for x in json.loads(r.stdout)["removed"]}
    assert removed == {"b", "c", "d"} and RT_KEY in crafted.index(fresh=True)


def test_cache_limit_and_stats_json(crafted):
    r = kf("cache", "limit", "10M", "--cache", str(crafted.root), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["max_size"] == 10_000_000
    s = kf("cache", "stats", "--cache", str(crafted.root), "--format", "json")
    data = json.loads(s.stdout)
    ls = json.loads(kf("cache", "ls", "--cache", str(crafted.root), "--format", "json").stdout)
    assert data["entries"] == len(ls["entries"]) == 5
    assert data["bytes"] == sum(sum(f["size"] for f in e["files"].values()) for e in ls["entries"])
    assert data["tree_bytes"] > data["bytes"]  # the index, views and meta.json count too
    assert data["stale"] >= 1  # the build from other kernel sources
    for cmd in (["clean"], ["verify"], ["repair"]):
        r = kf("cache", *cmd, "--cache", str(crafted.root), "--format", "json")
        json.loads(r.stdout)


def test_usage_log_never_raises_and_skips_read_only(tmp_path):
    from kernelforge.cache.read.usage import UsageLog

    root = tmp_path / "ro"
    (root / "v1").mkdir(parents=True)
    os.chmod(root / "v1", 0o555)
    try:
        wheel_like = UsageLog(root, enabled=False)  # what a read-only layer (a kernel wheel) gets
        wheel_like.record("load", "quantize", "k" * 64)
        if os.geteuid() != 0:  # root writes through the mode bits
            log = UsageLog(root)
            log.record("load", "quantize", "k" * 64)
            log.record("hit", "quantize", "k" * 64)
        assert not (root / "v1" / "usage").exists()
    finally:
        os.chmod(root / "v1", 0o755)
    rw = tmp_path / "rw"
    (rw / "v1").mkdir(parents=True)
    log = UsageLog(rw)
    for _ in range(3):
        log.record("load", "quantize", "k" * 64)  # once per process per entry
    log.record("miss", "quantize")
    u = read_usage(rw)
    assert u.counts["quantize"]["load"] == 1 and u.counts["quantize"]["miss"] == 1
    assert "k" * 64 in u.last_use
    (rw / "v1" / "usage").rename(rw / "v1" / "gone")  # a vanished dir: the open fd still writes, nothing raises
    log.record("hit", "quantize", "k" * 64)
