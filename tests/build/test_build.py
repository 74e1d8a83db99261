"""Real ahead-of-time builds on a CPU-only machine: CLI, artifacts, incremental, determinism,
failures, concurrent builders, corruption. Compiling tests are `slow`; see conftest.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore, clean, load_index_for_runtime, verify
from kernelforge.errors import CorruptArtifact
from kernelforge.spec import load_specs
from tests.build._kf_build_helpers import ARCH, NAMES, REPO, SELECTION, cli_env, kf_cmd, toolchain_problem

needs_toolchain = pytest.mark.skipif(toolchain_problem() is not None, reason=str(toolchain_problem()))
needs_binutils = pytest.mark.skipif(not (shutil.which("nm") and shutil.which("readelf")),
                                    reason="nm/readelf (binutils) not installed")

SPEC = REPO / "specs" / "quantize.toml"
# Tuning tables committed next to the default specs: `kernelforge build` imports each into the
# cache it builds (one entry of kind "tuning" per table).
TABLES = sorted((REPO / "kernelforge" / "data" / "tuning").glob("*.json"))
SUMMARY = re.compile(r"built (\d+), up to date (\d+), failed (\d+) in [\d.]+s")
BUILT_LINE = re.compile(r"^built (quantize\.\S+) in [\d.]+s$", re.M)

# A spec the loader accepts but that cannot compile: a 2-byte vector access of float32 input
# (vector_bytes < element size) makes the compiler reject a zero divisibility. "any" is fine.
BAD_SPEC = """
schema = 1
op = "quantize"
[axes]
format = ["mxfp8"]
scale_mode = ["floor"]
layout = ["linear"]
dtype = ["float32"]
kclass = ["odd", "any"]
arch = ["sm_90a"]
threads = [128]
units_per_thread = [1]
[kclass.odd]
k_multiple_blocks = 1
vector_bytes = 2
[kclass.any]
k_multiple_blocks = 1
vector_bytes = 0
"""
BAD_NAME = "quantize.mxfp8.floor.linear.float32.odd.sm_90a.t128u1"
GOOD_NAME = "quantize.mxfp8.floor.linear.float32.any.sm_90a.t128u1"


def _summary(text: str) -> tuple[int, int, int]:
    m = SUMMARY.search(text)
    assert m, f"no summary line in:\n{text}"
    return int(m[1]), int(m[2]), int(m[3])


def _kernels(root: Path) -> dict[str, dict]:
    """name -> runtime index entry of every kernel in the cache at root."""
    return {e["name"]: e for e in load_index_for_runtime(root).values() if e["kind"] == "kernel"}


def _runtimes(root: Path) -> list[dict]:
    return [e for e in load_index_for_runtime(root).values() if e["kind"] == "runtime"]


def _tuning_tables(root: Path) -> list[dict]:
    return [e for e in load_index_for_runtime(root).values() if e["kind"] == "tuning"]


def _catalog_variants(names) -> list:
    by_name = {v.name: v for v in load_specs([SPEC])}
    return [by_name[n] for n in names]


def _tmp_leftovers(store: CacheStore) -> list[Path]:
    return sorted(store.layout.tmp.iterdir()) if store.layout.tmp.is_dir() else []


# ---------------------------------------------------------------- the shared real build


@pytest.mark.slow
def test_cli_build(built_cache):
    assert built_cache.exit_code == 0, built_cache.output
    out = built_cache.output
    n_specs = len(list(SPEC.parent.glob("*.toml")))  # the default catalog: every spec file
    assert f"cache: {built_cache.root} (--cache); 2 variant(s) from {n_specs} spec file(s)" in out
    assert _summary(out) == (2, 0, 0)
    assert sorted(BUILT_LINE.findall(out)) == sorted(NAMES)
    assert "compile time per variant: min" in out
    kernels = _kernels(built_cache.root)
    assert sorted(kernels) == sorted(NAMES)
    runtimes = _runtimes(built_cache.root)
    assert len(runtimes) == 1
    for name, e in kernels.items():
        assert e["arch"] == ARCH and e["op"] == "quantize"
        assert e["variant"]["axes"]["arch"] == ARCH
        assert e["extra"]["runtime_key"] == runtimes[0]["key"]
        assert e["extra"]["symbol"] == "kf_" + name.replace(".", "_")
        assert Path(e["main_path"]).name == "module.so" and Path(e["main_path"]).is_file()
        assert "module.o" not in e["files"]  # the object is not kept
    for table in TABLES:
        assert f"tuning table {table.name}: tuning." in out
    assert len(_tuning_tables(built_cache.root)) == len(TABLES)
    report = verify(CacheStore(built_cache.root))
    # 2 kernels + 1 runtime library + the imported tuning tables
    assert report.ok and report.entries == 3 + len(TABLES) and not report.orphans, report.to_dict()


@pytest.mark.slow
def test_cli_cache_verify_clean(built_cache):
    proc = subprocess.run(kf_cmd("cache", "verify", "--cache", str(built_cache.root)),
                          capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK: {3 + len(TABLES)} entries verified" in proc.stdout  # 2 kernels, runtime, tuning tables


@pytest.mark.slow
@needs_binutils
def test_module_exports_and_needed(built_cache):
    runtime = _runtimes(built_cache.root)[0]
    rt_name = Path(runtime["main_path"]).name
    assert rt_name.startswith("libkfrt-") and rt_name.endswith(".so")
    for e in _kernels(built_cache.root).values():
        so = e["main_path"]
        nm = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True, check=True).stdout
        exported = {line.split()[-1] for line in nm.splitlines() if line.split()[1:2] == ["T"]}
        assert exported == {f"__tvm_ffi_{e['extra']['symbol']}"}, nm
        dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
        assert rt_name in needed and "libtvm_ffi.so" in needed, needed
        assert not any("cute_dsl_runtime" in n or n.startswith("libcuda.so") for n in needed), needed
        runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]", dyn)
        assert runpath and runpath[0].startswith("$ORIGIN/"), dyn  # relocatable cache
    dyn = subprocess.run(["readelf", "-d", runtime["main_path"]], capture_output=True, text=True, check=True).stdout
    assert "cute_dsl_runtime" not in dyn and "libcudart.so" not in dyn, dyn


CPU_CALL = """
import os, sys, torch
from kernelforge.cache import load_index_for_runtime
from kernelforge.cache.read.trust import TrustedRoot
from kernelforge.runtime.loader import load_function
root = sys.argv[1]
idx = load_index_for_runtime(root)
rt = [e for e in idx.values() if e["kind"] == "runtime"][0]
x = torch.zeros(4, 128, dtype=torch.bfloat16)
q = torch.zeros(4, 128, dtype=torch.uint8)
s = torch.zeros(16, dtype=torch.uint8)
# Bad calls, each stopped by the kernel's own argument checks (no GPU here) or by the launcher.
BAD = [(x, q, s, None), (x, q), (7, q, s, None), (x, q, s, 2.5), (x, q, s, None, True)]
errors, open_fds = {}, set()
for e in idx.values():
    if e["kind"] != "kernel":
        continue
    fn = load_function(TrustedRoot(root), e, rt)
    open_fds.add(len(os.listdir("/proc/self/fd")))  # a loaded module holds no descriptor
    errors[e["key"]] = []
    for args in BAD:
        try:
            fn(*args)
        except (TypeError, ValueError) as exc:
            errors[e["key"]].append((type(exc).__name__, str(exc)))
        else:
            raise AssertionError(f"{args!r} was accepted")
    assert "device_type=cuda" in errors[e["key"]][0][1], errors[e["key"]][0]
    try:
        fn("x", q, s, None)
    except TypeError as exc:
        want = "argument #0: expected a torch.Tensor, int, float, bool or None, got str"
        assert want in str(exc) and e["extra"]["symbol"] in str(exc), str(exc)
    else:
        raise AssertionError("a str was accepted")
    try:
        fn(x, q, s, None, stream=1)
    except TypeError as exc:
        assert "positional arguments only" in str(exc), str(exc)
    else:
        raise AssertionError("a keyword argument was accepted")
    print("OK", e["name"])
assert len(open_fds) == 1, open_fds
print("tvm_ffi imported:", "tvm_ffi" in sys.modules)
print("cutlass loaded:", any(m == "cutlass" or m.startswith("cutlass.") for m in sys.modules))
for line in open("/proc/self/maps"):
    if "libkfrt-" in line:
        print("runtime loaded from:", line.split(None, 5)[-1].strip())
# The reference: tvm_ffi's own call of the same entry points raises the same errors.
import tvm_ffi
for e in idx.values():
    if e["kind"] != "kernel":
        continue
    f = tvm_ffi.load_module(e["main_path"])[e["extra"]["symbol"]]
    for args, (kind, message) in zip(BAD, errors[e["key"]]):
        try:
            f(*args)
        except Exception as exc:
            assert (type(exc).__name__, str(exc).splitlines()[0]) == (kind, message.splitlines()[0]), (exc, message)
        else:
            raise AssertionError(f"tvm_ffi accepted {args!r}")
    print("SAME", e["name"])
"""


@pytest.mark.slow
def test_module_loads_and_checks_arguments_without_a_gpu(built_cache, tmp_path):
    # In a fresh process, from a moved copy of the cache: the RUNPATH is relative to the module,
    # so the copy's own runtime library is the one loaded. The runtime library's launcher
    # passes every argument as tvm_ffi's own call does: both raise the same errors.
    moved = tmp_path / "moved" / "cache"
    shutil.copytree(built_cache.root, moved)
    proc = subprocess.run([sys.executable, "-c", CPU_CALL, str(moved)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(re.findall(r"^OK (\S+)$", proc.stdout, re.M)) == sorted(NAMES)
    assert sorted(re.findall(r"^SAME (\S+)$", proc.stdout, re.M)) == sorted(NAMES)
    assert "tvm_ffi imported: False" in proc.stdout
    assert "cutlass loaded: False" in proc.stdout
    libs = re.findall(r"^runtime loaded from: (.+)$", proc.stdout, re.M)
    assert libs and all(lib.startswith(str(moved)) for lib in libs), proc.stdout


# ---------------------------------------------------------------- incremental builds


@pytest.mark.slow
def test_second_build_is_a_fast_noop(built_cache):
    assert built_cache.exit_code == 0, built_cache.output
    index = CacheStore(built_cache.root).layout.index
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    t0 = time.perf_counter()
    proc = subprocess.run(kf_cmd("build", "--cache", str(built_cache.root), "--arch", ARCH, "--only", SELECTION,
                                 "-v"), capture_output=True, text=True, env=cli_env())
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(proc.stdout) == (0, 2, 0)
    assert BUILT_LINE.findall(proc.stdout) == []
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert wall < 2.0, f"a no-op `kernelforge build` took {wall:.2f}s"


@pytest.mark.slow
def test_build_variants_noop(built_cache):
    from kernelforge.build.driver import build_variants

    store = CacheStore(built_cache.root)
    seen = []
    report = build_variants(_catalog_variants(NAMES), store, on_result=seen.append, on_start=seen.append)
    assert seen[0] == 0  # nothing to compile
    assert [r.status for r in report.results] == ["up to date"] * 2
    assert report.ok and not report.runtime_built
    assert {r.key for r in report.results} == {e["key"] for e in _kernels(built_cache.root).values()}
    assert report.seconds < 1.0, f"no-op build_variants took {report.seconds:.2f}s"


@needs_toolchain
def test_full_catalog_noop_is_fast(tmp_path):
    """Every variant of the default catalog already cached (dummy artifacts under the real keys):
    `kernelforge build` compiles nothing, imports no compiler, and finishes well under 2 s."""
    from kernelforge.build.keys import variant_key
    from kernelforge.build.toolchain import current_toolchain_id, toolchain
    from kernelforge.sources import source_hash

    variants = load_specs(sorted(SPEC.parent.glob("*.toml")))  # the default catalog: every spec file
    assert len(variants) >= 1000  # both tuning candidates of every dispatch key of both ops
    tc, tc_id = toolchain(), current_toolchain_id()
    store = CacheStore(tmp_path / "cache")
    # Every entry goes through the real `publish`, in the batch a build publishes in (the index
    # written once per BATCH_INDEX_EVERY entries, not re-read and rewritten for each).
    with store.publishing_batch():
        for v in variants:
            staging = store.staging_dir()
            (staging / "module.so").write_bytes(b"not really a module " + v.name.encode())
            src = source_hash(v.op)
            store.publish(variant_key(v.canonical(), src, tc), staging, kind="kernel", op=v.op, name=v.name,
                          variant=v.canonical(), arch=v.arch, toolchain_id=tc_id, toolchain=tc,
                          source_hash=src, main_file="module.so", build_time_s=0.0)
    assert len(_kernels(store.root)) == len(variants) and verify(store).ok
    from kernelforge.build.driver import build_variants

    report = build_variants(variants, store)
    assert report.count("up to date") == len(variants) and report.ok and not report.runtime_built
    assert report.seconds < 1.0, f"no-op build_variants over {len(variants)} variants took {report.seconds:.2f}s"

    t0 = time.perf_counter()
    proc = subprocess.run(kf_cmd("build", "--cache", str(store.root)), capture_output=True, text=True,
                          env=cli_env(), cwd=REPO)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(proc.stdout) == (0, len(variants), 0)
    assert wall < 2.0, f"a no-op `kernelforge build` of the full catalog took {wall:.2f}s"
    # The no-op path never imports the compiler.
    code = ("import sys; from kernelforge.build.driver import build_variants; from kernelforge.cache import "
            "CacheStore; from kernelforge.spec import load_specs; "
            f"r = build_variants(load_specs([{str(SPEC)!r}]), CacheStore({str(store.root)!r})); "
            "assert r.count('up to date') == len(r.results); "
            "print(sorted(m for m in sys.modules if m == 'cutlass' or m.startswith('cutlass.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- determinism


@pytest.mark.slow
def test_builds_are_deterministic(built_cache, tmp_path):
    """The same variant built into two different empty caches: same key, byte-identical module."""
    from kernelforge.build.driver import build_variants

    assert built_cache.exit_code == 0, built_cache.output
    name = NAMES[1]
    other = CacheStore(tmp_path / "other")
    report = build_variants(_catalog_variants([name]), other, jobs=1)
    assert [r.status for r in report.results] == ["built"], report.results
    assert report.runtime_built
    a, b = _kernels(built_cache.root)[name], _kernels(other.root)[name]
    assert a["key"] == b["key"] == report.results[0].key
    assert Path(a["main_path"]).read_bytes() == Path(b["main_path"]).read_bytes()
    assert a["sha256"] == b["sha256"] and a["files"] == b["files"]
    ra, rb = _runtimes(built_cache.root)[0], _runtimes(other.root)[0]
    assert ra["key"] == rb["key"]
    assert Path(ra["main_path"]).read_bytes() == Path(rb["main_path"]).read_bytes()


# ---------------------------------------------------------------- failures


@pytest.mark.slow
def test_failing_variant_is_reported_and_leaves_nothing(tmp_path):
    from kernelforge.build.driver import build_variants

    spec = tmp_path / "bad.toml"
    spec.write_text(BAD_SPEC)
    variants = load_specs([spec])
    assert sorted(v.name for v in variants) == sorted([BAD_NAME, GOOD_NAME])
    store = CacheStore(tmp_path / "cache")
    report = build_variants(variants, store, jobs=1)
    by = {r.name: r for r in report.results}
    assert by[GOOD_NAME].status == "built"
    bad = by[BAD_NAME]
    assert bad.status == "failed" and not report.ok and report.failed == [bad]
    assert "ValueError" in bad.error and "strictly positive" in bad.error, bad.error
    assert bad.key and bad.key not in store.index(fresh=True)
    assert not store.layout.entry_dir(bad.key, "kernel").exists()
    assert sorted(_kernels(store.root)) == [GOOD_NAME]
    assert _tmp_leftovers(store) == []
    assert store.orphans() == []
    assert verify(store).ok
    assert clean(store).orphans_removed == [] and sorted(_kernels(store.root)) == [GOOD_NAME]
    # Building again retries the failure (a failure is never cached) and keeps the good one.
    again = build_variants(variants, store, jobs=1)
    assert {r.name: r.status for r in again.results} == {GOOD_NAME: "up to date", BAD_NAME: "failed"}


@pytest.mark.slow
def test_cli_exits_nonzero_for_a_failing_selection(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(BAD_SPEC)
    root = tmp_path / "cache"
    proc = subprocess.run(kf_cmd("build", "--spec", str(spec), "--cache", str(root), "--only", "*.odd.*", "-j", "1"),
                          capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAILED {BAD_NAME}" in proc.stdout
    assert "strictly positive" in proc.stdout
    assert _summary(proc.stdout) == (0, 0, 1)
    assert f"failed: {BAD_NAME}" in proc.stderr
    assert _kernels(root) == {}
    assert _tmp_leftovers(CacheStore(root)) == []


@pytest.mark.parametrize("partial", [False, True], ids=["raises", "raises-after-writing"])
def test_compile_one_failure_in_process(tmp_path, monkeypatch, partial):
    """`_compile_one` (the worker body) run in this process with a compiler that fails."""
    from kernelforge.build import driver

    def compile_variant(v, obj):
        if partial:
            Path(obj).write_bytes(b"half an object")
        raise RuntimeError(f"boom compiling {v.name}")

    fake = types.ModuleType("kernelforge.build.compile")
    fake.compile_variant = compile_variant
    monkeypatch.setitem(sys.modules, "kernelforge.build.compile", fake)
    v = _catalog_variants([NAMES[0]])[0]
    store = CacheStore(tmp_path / "cache")
    key = "ab" * 32
    r = driver._compile_one(v, key, str(store.root), str(tmp_path / "nope.so"), "cd" * 32, {}, "tc")
    assert r.status == "failed" and r.name == v.name and r.key == key
    assert r.error == f"RuntimeError: boom compiling {v.name}"
    assert store.index(fresh=True) == {}
    assert not store.layout.entry_dir(key, "kernel").exists()
    assert _tmp_leftovers(store) == [] and store.orphans() == []


# ---------------------------------------------------------------- concurrent builders


@pytest.mark.slow
def test_concurrent_builds_compile_each_key_once(tmp_path):
    root = tmp_path / "cache"
    # One tuning candidate (threads = 128) per dispatch key keeps the compile count at three.
    a = ["--only", "quantize.mxfp8.floor.linear.float16.*.t128u1"]
    b = ["--only", "quantize.mxfp8.floor.linear.float16.any.*.t128u1",
         "--only", "quantize.mxfp8.rceil.linear.float16.any.*.t128u1"]
    procs = [subprocess.Popen(kf_cmd("build", "--cache", str(root), "--arch", ARCH, "-v", "-j", "1", *sel),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
             for sel in (a, b)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    expected = {
        "quantize.mxfp8.floor.linear.float16.aligned.sm_90a.t128u1",
        "quantize.mxfp8.floor.linear.float16.any.sm_90a.t128u1",
        "quantize.mxfp8.rceil.linear.float16.any.sm_90a.t128u1",
    }
    built = [n for out, _ in outs for n in BUILT_LINE.findall(out)]
    assert sorted(built) == sorted(expected), outs  # every key compiled exactly once, by one of them
    totals = [_summary(out) for out, _ in outs]
    assert [t[0] + t[1] for t in totals] == [2, 2] and sum(t[0] for t in totals) == 3
    assert all(t[2] == 0 for t in totals)
    kernels = _kernels(root)
    assert set(kernels) == expected
    assert len({e["key"] for e in kernels.values()}) == 3
    assert len(_runtimes(root)) == 1
    assert len(_tuning_tables(root)) == len(TABLES)  # imported by both builders, published once
    store = CacheStore(root)
    # 3 kernels + 1 runtime + the tuning tables: nothing built or published twice
    assert len(store.layout.artifact_dirs()) == 4 + len(TABLES)
    report = verify(store)
    assert report.ok and report.entries == 4 + len(TABLES) and not report.orphans, report.to_dict()
    assert _tmp_leftovers(store) == []


# ---------------------------------------------------------------- corruption


@pytest.mark.slow
def test_corrupt_module_is_reported_and_rejected(built_cache, tmp_path, monkeypatch):
    from kernelforge.runtime.loader import load_function

    assert built_cache.exit_code == 0, built_cache.output
    root = tmp_path / "cache"
    shutil.copytree(built_cache.root, root)
    idx = load_index_for_runtime(root)
    runtime = _runtimes(root)[0]
    kernels = _kernels(root)
    bad = kernels[NAMES[0]]
    path = Path(bad["main_path"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    proc = subprocess.run(kf_cmd("cache", "verify", "--cache", str(root)), capture_output=True, text=True,
                          env=cli_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "sha256 mismatch" in proc.stdout and NAMES[0] in proc.stdout and "FAILED: 1 problem(s)" in proc.stdout
    assert NAMES[1] not in proc.stdout

    from kernelforge.cache.read.trust import TrustedRoot

    trusted = TrustedRoot(root)
    with pytest.raises(CorruptArtifact, match="kernel module .* is corrupt.*kernelforge build --verify"):
        load_function(trusted, bad, runtime)
    # The damaged bytes are rejected on every attempt (no negative caching of a good check).
    with pytest.raises(CorruptArtifact):
        load_function(trusted, idx[bad["key"]], runtime)

    # A damaged shared runtime library is rejected before any module that needs it is loaded
    # (checked in a second copy: this process has already checked the first copy's runtime file).
    root2 = tmp_path / "cache2"
    shutil.copytree(built_cache.root, root2)
    rt2 = _runtimes(root2)[0]
    rt_path = Path(rt2["main_path"])
    rdata = bytearray(rt_path.read_bytes())
    rdata[len(rdata) // 2] ^= 0xFF
    rt_path.write_bytes(bytes(rdata))
    from kernelforge.runtime import loader

    monkeypatch.setattr(loader, "_runtimes", {})  # as in a fresh process (this one holds the good copy)
    with pytest.raises(CorruptArtifact, match="runtime library .* is corrupt"):
        load_function(TrustedRoot(root2), _kernels(root2)[NAMES[1]], rt2)
    proc = subprocess.run(kf_cmd("cache", "verify", "--cache", str(root2)), capture_output=True, text=True,
                          env=cli_env())
    assert proc.returncode == 1 and "sha256 mismatch" in proc.stdout, proc.stdout + proc.stderr
    # A missing module is reported as such.
    Path(kernels[NAMES[1]]["main_path"]).unlink()
    with pytest.raises(CorruptArtifact, match="does not exist"):
        load_function(trusted, kernels[NAMES[1]], runtime)


@pytest.mark.slow
def test_runtime_library_without_the_launcher_is_refused_with_the_rebuild_command(built_cache, tmp_path):
    # A runtime library from before the launcher (link recipe < 4): intact and recorded with its
    # true sha256, but no Python extension. A real shared library with the runtime's soname and
    # a constructor that leaves a marker stands in for it; it is refused with the command that
    # rebuilds, and (as any shared library opened by the dynamic linker) its constructor ran.
    import hashlib
    import json

    root = tmp_path / "cache"
    shutil.copytree(built_cache.root, root)
    lib = Path(_runtimes(root)[0]["main_path"])
    marker = tmp_path / "constructor-ran"
    src = tmp_path / "old_runtime.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void mark(void) {\n'
                   f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\nint old_runtime_symbol(void) {{ return 1; }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), f"-Wl,-soname,{lib.name}", str(src)], check=True)
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()
    meta_path = lib.parent / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["files"][lib.name]["sha256"] = digest
    meta_path.write_text(json.dumps(meta))
    # In a fresh process: the planted library takes the runtime's soname in the process that loads it.
    code = ("import sys\nfrom kernelforge.cache import load_index_for_runtime\n"
            "from kernelforge.cache.read.trust import TrustedRoot\nfrom kernelforge.errors import CorruptArtifact\n"
            "from kernelforge.runtime.loader import load_function\nroot = sys.argv[1]\n"
            "idx = load_index_for_runtime(root)\n"
            "rt = [e for e in idx.values() if e['kind'] == 'runtime'][0]\n"
            "k = [e for e in idx.values() if e['kind'] == 'kernel'][0]\n"
            "try:\n    load_function(TrustedRoot(root), k, {**rt, 'sha256': sys.argv[2]})\n"
            "except CorruptArtifact as exc:\n    print('REFUSED', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(root), digest], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^REFUSED runtime library \w+ predates the launcher .* fix: kernelforge build --cache .* "
                     r"--arch sm_90a", proc.stdout, re.M), proc.stdout
    assert marker.exists()  # it was loaded (then refused): the checks before loading passed
