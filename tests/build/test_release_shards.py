"""The release pipeline: `build --shard`, `cache merge`, `build --check-reproducible`, resuming.

Real CPU compiles (marked `slow`) share one module fixture: the shards of a 4-variant selection
built by separate processes into separate roots, merged into a third, and a one-process build
into a fourth. The argument checks and the library pieces below them need no compiler.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelforge.build.hermetic import ignored_compile_env, pin_compile_env
from kernelforge.build.reproducible import DIFFERS, OK, compare_entry
from kernelforge.build.shard import in_shard, parse_shard, shard_of
from kernelforge.cache import CacheStore, verify
from kernelforge.cache.read.index import write_index
from kernelforge.cache.store import sha256_file
from kernelforge.cache.transfer.merge import merge
from kernelforge.cli import app
from tests.build._kf_build_helpers import ARCH, REPO, cli_env, kf_cmd, toolchain_problem

# Four variants (2 K-classes x 2 thread counts) of the cheapest op to compile.
SELECTION = "quantize.mxfp8.floor.linear.bfloat16.*"
needs_toolchain = pytest.mark.skipif(toolchain_problem() is not None, reason=str(toolchain_problem()))


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def _build_cmd(root: Path, *extra: str) -> list[str]:
    return kf_cmd("build", "--cache", str(root), "--arch", ARCH, "--only", SELECTION, *extra)


def _digests(root: Path) -> dict[str, tuple[str, str]]:
    """key -> (name, sha256 of the main file) of every kernel and runtime entry."""
    return {e.key: (e.name, e.sha256) for e in CacheStore(root).index(fresh=True).values() if e.kind != "tuning"}


def _selected_keys() -> list[str]:
    from kernelforge.build.keys import variant_key
    from kernelforge.build.toolchain import toolchain
    from kernelforge.sources import source_hash
    from kernelforge.spec import load_specs, select
    from kernelforge.spec.files import resolve_spec_paths

    variants = select(load_specs(resolve_spec_paths(None)), only=[SELECTION], archs=[ARCH])
    return [variant_key(v.canonical(), source_hash(v.op), toolchain()) for v in variants]


def _shard_count(keys: list[str]) -> int:
    """The smallest N >= 2 that puts the selection in at least two shards (keys depend on the
    host's toolchain, so N = 2 may put all four in one shard)."""
    return next(n for n in range(2, 9) if len({int(k, 16) % n for k in keys}) >= 2)


@dataclass
class Release:
    keys: list[str]
    shards: list[Path]
    merged: Path
    full: Path
    merge_output: str


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Release:
    base = tmp_path_factory.mktemp("release")
    keys = _selected_keys()
    n = _shard_count(keys)
    shards = [base / f"shard{i}" for i in range(1, n + 1)]
    procs = [subprocess.Popen(_build_cmd(root, "--shard", f"{i}/{n}", "-j", "1"), cwd=base, env=cli_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, root in enumerate(shards, 1)]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
    full = base / "full"
    proc = subprocess.run(_build_cmd(full, "-j", "2"), cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = base / "merged"
    result = _cli("cache", "merge", *map(str, shards), "--cache", str(merged))
    assert result.exit_code == 0, result.output
    return Release(keys, shards, merged, full, result.output)


@pytest.mark.slow
@needs_toolchain
def test_shards_merge_into_the_one_process_build(release):
    n = len(release.shards)
    for i, root in enumerate(release.shards, 1):
        kinds = {e.kind for e in CacheStore(root).index().values()}
        assert "runtime" in kinds, f"shard {i}/{n} lacks the runtime library"
        built = {e.key for e in CacheStore(root).index().values() if e.kind == "kernel"}
        assert built == {k for k in release.keys if in_shard(k, (i, n))}
    merged, full = _digests(release.merged), _digests(release.full)
    assert len(merged) == len(release.keys) + 1  # + the runtime library
    assert merged == full  # same keys, same names, same sha256 of every module and the runtime
    assert "conflicts 0, refused 0" in release.merge_output
    result = _cli("cache", "verify", "--cache", str(release.merged))
    assert result.exit_code == 0 and "OK:" in result.output, result.output


@pytest.mark.slow
@needs_toolchain
def test_merge_again_changes_nothing(release, tmp_path):
    dest = tmp_path / "dest"
    shutil.copytree(release.merged, dest)
    report = merge([release.full, *release.shards], CacheStore(dest))
    assert report.ok and not report.merged, report.refused
    assert _digests(dest) == _digests(release.full)


def _alter_consistently(root: Path, key: str) -> str:
    """Change one kernel's module.so bytes and record the new sha256 in its meta.json and the
    index, so the cache passes its own verification; return the new sha256."""
    store = CacheStore(root)
    entry = store.index(fresh=True)[key]
    module = store.entry_dir(entry) / entry.main_file
    module.write_bytes(module.read_bytes() + b"\0")
    sha, size = sha256_file(module)
    data = {**entry.to_json(), "files": {**entry.files, entry.main_file: {"sha256": sha, "size": size}}}
    (store.entry_dir(entry) / "meta.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    raw = json.loads(store.layout.index.read_text())["entries"]
    raw[key] = data
    write_index(store.layout.index, raw)
    return sha


def _a_kernel(root: Path) -> tuple[str, str, str]:
    entry = next(e for e in CacheStore(root).iter_entries() if e.kind == "kernel")
    return entry.key, entry.name, entry.sha256


@pytest.mark.slow
@needs_toolchain
def test_merge_refuses_conflicting_bytes(release, tmp_path):
    source, dest = tmp_path / "source", tmp_path / "dest"
    shutil.copytree(release.full, source)
    shutil.copytree(release.merged, dest)
    key, name, dest_sha = _a_kernel(source)
    new_sha = _alter_consistently(source, key)
    assert verify(CacheStore(source)).ok
    result = _cli("cache", "merge", str(source), "--cache", str(dest))
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("CONFLICT"))
    assert name in line and key in line and dest_sha in line and new_sha in line
    assert "conflicts 1" in result.output
    assert _digests(dest) == _digests(release.full)  # the destination's entry is untouched
    assert verify(CacheStore(dest)).ok


@pytest.mark.slow
@needs_toolchain
def test_merge_refuses_bytes_that_do_not_match_their_sha256(release, tmp_path):
    source, dest = tmp_path / "source", tmp_path / "dest"
    shutil.copytree(release.full, source)
    key, name, _ = _a_kernel(source)
    entry = CacheStore(source).index()[key]
    module = CacheStore(source).entry_dir(entry) / entry.main_file
    module.write_bytes(module.read_bytes()[:-1] + b"\x7f")  # same size, other bytes
    result = _cli("cache", "merge", str(source), "--cache", str(dest))
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("REFUSED"))
    assert name in line and "does not match its recorded sha256" in line
    merged = _digests(dest)
    assert key not in merged and merged == {k: v for k, v in _digests(release.full).items() if k != key}
    assert verify(CacheStore(dest)).ok
    assert not list(CacheStore(dest).layout.tmp.iterdir())  # no staging dir left behind


@pytest.mark.slow
@needs_toolchain
def test_check_reproducible_passes(release):
    proc = subprocess.run(_build_cmd(release.merged, "--check-reproducible", "--sample", "2"), cwd=REPO,
                          env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("OK ", "DIFFERS ", "FAILED "))]
    assert len(lines) == 3 and all(ln.startswith("OK ") for ln in lines), proc.stdout
    assert any(" runtime-" in ln for ln in lines)


@pytest.mark.slow
@needs_toolchain
def test_interrupted_build_resumes_with_what_is_missing(release, tmp_path):
    """A shard's cache plus the debris of a crash (an entry moved into place but never indexed,
    a dead builder's staging dir): a full build builds exactly the missing variants, adopting
    the intact unindexed entry instead of compiling it again."""
    partial = next(r for r in release.shards if 0 < len(_digests(r)) - 1 < len(release.keys))
    root = tmp_path / "cache"
    shutil.copytree(partial, root)
    have = set(_digests(root))
    missing = [k for k in release.keys if k not in have]
    full = CacheStore(release.full)
    lost = full.index()[missing[0]]
    shutil.copytree(full.entry_dir(lost), CacheStore(root).entry_dir(lost))
    (CacheStore(root).layout.tmp / "stage-otherhost-1-x").mkdir(parents=True)
    proc = subprocess.run(_build_cmd(root, "-j", "2"), cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the intact entry the index lost is adopted (re-indexed, not compiled): reported as up to date
    assert f"built {len(missing) - 1}, up to date {len(release.keys) - len(missing) + 1}, failed 0" in proc.stdout
    assert _digests(root) == _digests(release.full)
    assert verify(CacheStore(root)).ok


# ---------------------------------------------------------------- no compiler needed


@pytest.mark.parametrize("arg", ["3/2", "x", "0/2", "1/0", "1/", "/2", "1-2"])
def test_bad_shard_is_rejected_with_exit_2(arg, tmp_path):
    result = _cli("build", "--cache", str(tmp_path / "c"), "--shard", arg)
    assert result.exit_code == 2, result.output
    assert "--shard" in result.output and "1 <= I <= N" in result.output
    assert not (tmp_path / "c").exists()


def test_shards_partition_the_keys():
    rng = random.Random(0)
    keys = [f"{rng.getrandbits(256):064x}" for _ in range(200)]
    assert parse_shard(" 2/3 ") == (2, 3)
    for n in (1, 2, 5):
        parts = [shard_of([(k, k) for k in keys], (i, n)) for i in range(1, n + 1)]
        assert sorted(k for part in parts for k, _ in part) == sorted(keys)
        assert all(parts) and sum(map(len, parts)) == len(keys)


def test_compile_env_is_pinned():
    env = {"CUTE_DSL_LINEINFO": "1", "CUTE_DSL_COMPILER_OPT": "x", "CUTE_DSL_KEEP": "ptx",
           "CUTE_DSL_LOG_LEVEL": "10", "CUTE_EXPERIMENTAL_DSL_ARCH": "sm_100a", "PATH": "/bin"}
    assert ignored_compile_env(env) == ["CUTE_DSL_COMPILER_OPT", "CUTE_DSL_LINEINFO", "CUTE_EXPERIMENTAL_DSL_ARCH"]
    pin_compile_env(env)
    assert env == {"CUTE_DSL_KEEP": "ptx", "CUTE_DSL_LOG_LEVEL": "10", "PATH": "/bin"}


def _fake_kernel(root: Path, payload: bytes, **extra: str) -> CacheStore:
    store = CacheStore(root)
    staging = store.staging_dir()
    (staging / "module.so").write_bytes(payload)
    store.publish("ab" * 32, staging, kind="kernel", op="quantize", name="fake", variant={}, arch="sm_90a",
                  toolchain_id="t", toolchain={}, source_hash="s", main_file="module.so", build_time_s=0.0,
                  extra=extra)
    return store


def test_compare_entry_reports_differing_bytes(tmp_path):
    a, b, c = (_fake_kernel(tmp_path / n, p) for n, p in (("a", b"one"), ("b", b"one"), ("c", b"two")))
    key = "ab" * 32
    assert compare_entry(a, a.get(key), b, b.get(key)).status == OK
    differs = compare_entry(a, a.get(key), c, c.get(key))
    assert differs.status == DIFFERS and "module.so" in differs.detail
    assert differs.cached_sha256 != differs.rebuilt_sha256


def test_merge_refuses_a_kernel_without_its_runtime(tmp_path):
    source = _fake_kernel(tmp_path / "src", b"x", runtime_key="cd" * 32)
    report = merge([source.root], CacheStore(tmp_path / "dest"))
    assert not report.merged and [r.key for r in report.refused] == ["ab" * 32]
    assert "runtime library" in report.refused[0].reason


@pytest.mark.slow
@needs_toolchain
def test_rebuild_sample_refuses_a_signed_shard_that_did_not_build_its_keys(release, tmp_path):
    """A builder holding the release key (compromised, or broken) signs a module that is not what
    its key builds: signatures cannot tell, rebuilding a sample does."""
    key = tmp_path / "release-key"
    assert _cli("key", "generate", str(key)).exit_code == 0
    genuine, forged = tmp_path / "genuine", tmp_path / "forged"
    # A shard that holds a kernel (which shard does depends on the keys, so on the kernel sources).
    shard = next(r for r in release.shards if any(e.kind == "kernel" for e in CacheStore(r).iter_entries()))
    shutil.copytree(shard, genuine)
    shutil.copytree(shard, forged)
    kernel_key, name, _ = _a_kernel(forged)
    _alter_consistently(forged, kernel_key)
    for root in (genuine, forged):
        assert _cli("cache", "sign", "--key", str(key), "--cache", str(root)).exit_code == 0
    trust = ("--trusted-keys", f"{key}.pub")
    ok = _cli("cache", "merge", str(genuine), "--cache", str(tmp_path / "d1"), *trust, "--rebuild-sample", "1.0")
    assert ok.exit_code == 0, ok.output
    bad = _cli("cache", "merge", str(forged), "--cache", str(tmp_path / "d2"), *trust, "--rebuild-sample", "1.0")
    assert bad.exit_code == 1 and f"{name} [{kernel_key[:12]}] rebuilds to sha256" in bad.output, bad.output
    assert not CacheStore(tmp_path / "d2").index(fresh=True)  # nothing of the source was merged
    for bad_value in ("1.5", "0", "-1", "nan", "1e3", "\uff11", "99999999999999999999"):
        usage = _cli("cache", "merge", str(genuine), "--cache", str(tmp_path / "d3"), "--rebuild-sample", bad_value)
        assert usage.exit_code == 2 and "expected a number of entries" in usage.output, (bad_value, usage.output)
