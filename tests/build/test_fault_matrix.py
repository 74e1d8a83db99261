"""The cache's fault matrix: inject each real fault into a copy of a real build, then assert
that no foreign code runs, the error or exit code, verify's verdict, and that the documented
healing command restores a working cache with nothing lost.

Foreign code is a real shared library whose constructor writes a marker file; the runtime is
exercised in a fresh subprocess per case (DispatchTable.resolve loads modules on the CPU).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.build._kf_build_helpers import ARCH, NAMES, REPO, SELECTION, cli_env, kf_cmd

pytestmark = pytest.mark.slow

ALIGNED, ANY = NAMES  # the aligned K-class is preferred for an aligned input; "any" accepts it too
EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void kf_planted(void) {
    const char *path = getenv("KF_MARKER");
    FILE *f = fopen(path ? path : "/tmp/kf-planted-marker", "w");
    if (f) { fputs("foreign code ran\n", f); fclose(f); }
}
"""
# Resolve an aligned quantize input on capability 9.0 in a fresh process; print what happened.
RESOLVE = r"""
import json, sys, warnings
from kernelforge.runtime.dispatch import DispatchTable
COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        fn, cand = DispatchTable(sys.argv[1]).resolve("quantize", COORDS, (9, 0), 256, 32, 256, 512, 128)
        out = {"ok": True, "name": cand.entry["name"], "key": cand.entry["key"]}
    except Exception as exc:
        out = {"ok": False, "type": type(exc).__name__, "message": str(exc)}
out["warnings"] = [str(w.message) for w in caught]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def evil_so(tmp_path_factory) -> Path:
    """A real shared library whose constructor writes $KF_MARKER."""
    d = tmp_path_factory.mktemp("evil")
    (d / "evil.c").write_text(EVIL_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "evil.so"), str(d / "evil.c")], check=True)
    return d / "evil.so"


@pytest.fixture(scope="module")
def pristine(built_cache) -> Path:
    assert built_cache.exit_code == 0, built_cache.output
    return built_cache.root


class Case:
    """One copy of the pristine cache, with helpers to break it, run the runtime and the CLI."""

    def __init__(self, pristine: Path, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o755)
        self.root = base / "cache"
        shutil.copytree(pristine, self.root, symlinks=True)
        self.marker = base / "marker"
        self.index_path = self.root / "v1" / "index.json"
        self.before = self.shas()

    # ---- inspection ----
    def index(self) -> dict:
        return json.loads(self.index_path.read_text())["entries"]

    def key_of(self, name: str) -> str:
        return next(k for k, e in self.index().items() if e["name"] == name)

    def entry_dir(self, name: str) -> Path:
        e = self.index()[self.key_of(name)]
        return self.root / "v1" / e["path"]

    def runtime_key(self) -> str:
        return next(k for k, e in self.index().items() if e["kind"] == "runtime")

    def shas(self) -> dict[str, str]:
        """key -> sha256 of the main file, read from the entries' meta.json on disk."""
        out = {}
        for meta in (self.root / "v1").glob("*/**/meta.json"):
            if "quarantine" in meta.parts:
                continue
            m = json.loads(meta.read_text())
            out[m["key"]] = m["files"][m["main_file"]]["sha256"]
        return out

    def write_index(self, entries: dict) -> None:
        """Rewrite the index *and* its dispatch views consistently (an attacker who knows the format)."""
        from kernelforge.cache.read.index import write_index

        write_index(self.index_path, entries)

    # ---- running ----
    def resolve(self, env: dict | None = None, as_: list[str] = ()) -> dict:
        e = {**cli_env(), "KF_MARKER": str(self.marker), **(env or {})}
        proc = subprocess.run([*as_, sys.executable, "-c", RESOLVE, str(self.root)], capture_output=True,
                              text=True, env=e, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        assert not self.marker.exists(), "FOREIGN CODE RAN"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def kf(self, *args: str, env: dict | None = None, as_: list[str] = ()) -> subprocess.CompletedProcess:
        proc = subprocess.run([*as_, *kf_cmd(*args)], capture_output=True, text=True,
                              env={**cli_env(), **(env or {})}, cwd=REPO)
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
        return proc

    def verify(self, **kw) -> subprocess.CompletedProcess:
        return self.kf("cache", "verify", "--cache", str(self.root), **kw)

    def build(self, *extra: str, **kw) -> subprocess.CompletedProcess:
        return self.kf("build", "--cache", str(self.root), "--arch", ARCH, "--only", SELECTION, "-j", "2", *extra,
                       **kw)

    def assert_healthy(self) -> None:
        """Verify passes, the preferred build serves the call with no warning, nothing was lost."""
        v = self.verify()
        assert v.returncode == 0, v.stdout + v.stderr
        r = self.resolve()
        assert r["ok"] and r["name"] == ALIGNED and r["warnings"] == [], r
        now = self.shas()
        assert set(self.before) <= set(now), "an entry was lost"


@pytest.fixture
def case(pristine, tmp_path) -> Case:
    return Case(pristine, tmp_path / "c")


def test_pristine_copy_is_healthy(case: Case) -> None:
    case.assert_healthy()


# ---- 1. files the index names: traversal, absolute paths, edited checksums ----

@pytest.mark.parametrize("where", ["traversal", "absolute"])
def test_index_naming_a_file_outside_the_entry_is_refused(case: Case, evil_so: Path, where: str) -> None:
    key = case.key_of(ALIGNED)
    planted = case.root / "v1" / "evil" / "evil.so"
    planted.parent.mkdir()
    shutil.copy(evil_so, planted)
    name = "../../../evil/evil.so" if where == "traversal" else str(planted)
    from kernelforge.cache.store import sha256_file

    sha, size = sha256_file(planted)
    entries = case.index()
    entries[key]["main_file"] = name
    entries[key]["files"][name] = {"sha256": sha, "size": size}
    case.write_index(entries)

    r = case.resolve()  # falls back to the other K-class, says so once
    assert r["ok"] and r["name"] == ANY and any("skipping a damaged cached build" in w for w in r["warnings"]), r
    v = case.verify()
    assert v.returncode == 1 and "unusable index" in v.stdout, v.stdout
    assert case.kf("cache", "repair", "--cache", str(case.root)).returncode == 0
    case.assert_healthy()


def test_index_checksum_edited_to_match_a_planted_module(case: Case, evil_so: Path) -> None:
    from kernelforge.cache.store import sha256_file

    key = case.key_of(ALIGNED)
    module = case.entry_dir(ALIGNED) / "module.so"
    shutil.copy(evil_so, module)
    sha, size = sha256_file(module)
    entries = case.index()
    entries[key]["files"]["module.so"] = {"sha256": sha, "size": size}
    case.write_index(entries)

    r = case.resolve()  # the entry's meta.json still names the built bytes
    assert r["ok"] and r["name"] == ANY and any("meta.json" in w for w in r["warnings"]), r
    assert case.verify().returncode == 1
    b = case.build("--verify")  # the documented fix for damaged content
    assert b.returncode == 0 and f"replaced damaged entry {ALIGNED}" in b.stdout, b.stdout + b.stderr
    case.assert_healthy()
    assert list((case.root / "v1" / "quarantine").iterdir()), "the planted module is kept for inspection"


@pytest.mark.parametrize("forge", ["group only", "group renamed and manifest"])
def test_dispatch_view_edited(case: Case, evil_so: Path, forge: str) -> None:
    from kernelforge.cache.read.views import group_file_name
    from kernelforge.cache.store import sha256_file

    views = case.root / "v1" / "dispatch"
    manifest = json.loads((views / "manifest.json").read_text())
    gid, gname = next(iter(manifest["groups"].items()))
    group = json.loads((views / "groups" / gname).read_text())
    planted = case.root / "v1" / "evil.so"
    shutil.copy(evil_so, planted)
    sha, _ = sha256_file(planted)
    for e in group["entries"]:
        e["path"], e["main_file"], e["sha256"] = "..", "evil.so", sha
    payload = json.dumps(group, separators=(",", ":"), sort_keys=True)
    if forge == "group only":
        (views / "groups" / gname).write_text(payload)
    else:
        new = group_file_name(payload.encode())
        (views / "groups" / new).write_text(payload)
        manifest["groups"][gid] = new
        (views / "manifest.json").write_text(json.dumps(manifest, separators=(",", ":"), sort_keys=True))

    r = case.resolve()
    if forge == "group only":  # the bytes do not match the group file's name: the index is read instead
        assert r["ok"] and r["name"] == ALIGNED, r
    else:  # every candidate fails its checks: refused, with the command that fixes it
        assert not r["ok"] and r["type"] == "CorruptArtifact" and "fix: kernelforge cache repair" in r["message"], r
    v = case.verify()
    assert v.returncode == 1 and "dispatch views disagree" in v.stdout, v.stdout
    assert case.kf("cache", "repair", "--cache", str(case.root)).returncode == 0
    case.assert_healthy()


def test_runtime_entry_dropped_and_a_fake_runtime_planted(case: Case, evil_so: Path) -> None:
    rkey = case.runtime_key()
    entries = case.index()
    rt = entries.pop(rkey)
    case.write_index(entries)
    shutil.copy(evil_so, case.root / "v1" / rt["path"] / rt["main_file"])  # where RUNPATH would find it

    r = case.resolve()
    assert not r["ok"] and "not in the cache index" in r["message"], r
    v = case.verify()
    assert v.returncode == 1 and "runtime library not indexed" in v.stdout, v.stdout
    b = case.build()  # the missing runtime library is noticed by a plain build and rebuilt
    assert b.returncode == 0, b.stdout + b.stderr
    case.assert_healthy()


def test_file_swapped_between_check_and_load(case: Case, evil_so: Path) -> None:
    """A rename over module.so after its bytes were hashed does not change what is loaded."""
    swap = r"""
import json, os, shutil, sys
from kernelforge.runtime import loader
from kernelforge.runtime.dispatch import DispatchTable
root, module, evil = sys.argv[1:4]
check = loader._check_meta
def swapping(trusted, entry, *args, **kw):
    check(trusted, entry, *args, **kw)
    if entry.get("kind") == "kernel":
        shutil.copy(evil, module + ".new")
        os.replace(module + ".new", module)   # the verified descriptor is still open
loader._check_meta = swapping
COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
fn, cand = DispatchTable(root).resolve("quantize", COORDS, (9, 0), 256, 32, 256, 512, 128)
print(cand.entry["name"], fn is not None)
"""
    module = case.entry_dir(ALIGNED) / "module.so"
    proc = subprocess.run([sys.executable, "-c", swap, str(case.root), str(module), str(evil_so)],
                          capture_output=True, text=True, env={**cli_env(), "KF_MARKER": str(case.marker)}, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [ALIGNED, "True"]
    assert not case.marker.exists(), "FOREIGN CODE RAN"
    assert case.verify().returncode == 1  # the swapped file is now on disk ...
    assert case.build("--verify").returncode == 0  # ... and the documented fix replaces it
    case.assert_healthy()


# ---- 2. ownership and permissions ----

@pytest.mark.parametrize("target", ["root", "module"])
def test_writable_by_others_is_refused_unless_opted_out(case: Case, target: str) -> None:
    path = case.root if target == "root" else case.entry_dir(ALIGNED) / "module.so"
    os.chmod(path, 0o777 if target == "root" else 0o666)
    r = case.resolve()
    assert not r["ok"] and r["type"] == "UntrustedCache" and str(path) in r["message"], r
    assert "KERNELFORGE_TRUST_SHARED_CACHE=1" in r["message"] and "cache repair" in r["message"]
    assert case.verify().returncode == 1
    opted = {"KERNELFORGE_TRUST_SHARED_CACHE": "1"}
    assert case.resolve(env=opted)["ok"] and case.verify(env=opted).returncode == 0
    rep = case.kf("cache", "repair", "--cache", str(case.root))
    assert rep.returncode == 0 and "removed group/other write permission" in rep.stdout, rep.stdout
    case.assert_healthy()


def _nobody() -> int:
    import pwd

    return pwd.getpwnam("nobody").pw_uid


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user (nobody)")
# Root without any capability: file permissions apply to it like to any user (a read-only cache).
NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]


@needs_root
def test_cache_owned_by_another_user_is_refused(case: Case) -> None:
    for dirpath, dirnames, filenames in os.walk(case.root):
        for name in [*dirnames, *filenames, ""]:
            os.lchown(os.path.join(dirpath, name), _nobody(), -1)
    r = case.resolve()
    assert not r["ok"] and r["type"] == "UntrustedCache" and "owned by uid" in r["message"] and "chown" in r["message"]
    assert case.verify().returncode == 1
    assert case.resolve(env={"KERNELFORGE_TRUST_SHARED_CACHE": "1"})["ok"]
    for dirpath, dirnames, filenames in os.walk(case.root):  # the documented fix
        for name in [*dirnames, *filenames, ""]:
            os.lchown(os.path.join(dirpath, name), 0, -1)
    case.assert_healthy()


def _read_only_users() -> list:
    users = []
    if os.geteuid() == 0 and shutil.which("setpriv"):
        users.append(pytest.param(NO_CAPS, id="root-without-capabilities"))
        nobody = ["setpriv", f"--reuid={_nobody()}", f"--regid={_nobody()}", "--clear-groups"]
        runs = subprocess.run([*nobody, sys.executable, "-c", "0"], capture_output=True).returncode == 0
        users.append(pytest.param(nobody, id="nobody", marks=pytest.mark.skipif(
            not runs, reason=f"user nobody cannot execute {sys.executable} (its directories are private)")))
    return users or [pytest.param([], marks=pytest.mark.skip(reason="needs root and setpriv to drop write access"))]


@pytest.mark.parametrize("as_", _read_only_users())
def test_read_only_cache_serves_and_refuses_writes_cleanly(case: Case, as_: list[str]) -> None:
    """Another user (or root without capabilities) on a cache it cannot write: the runtime serves
    it; a no-op build and verify work and write nothing; builds that must write, clean and repair
    say in one line that the root is not writable and exit 2."""
    shared = Path(tempfile.mkdtemp(prefix="kf-shared-"))  # a path nobody can reach
    try:
        os.chmod(shared, 0o755)
        root = shared / "cache"
        shutil.copytree(case.root, root, symlinks=True)
        for p in [root, *root.rglob("*")]:
            os.chmod(p, stat.S_IMODE(p.stat().st_mode) & ~0o222)
        case.root, case.index_path = root, root / "v1" / "index.json"
        snapshot = sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*"))
        r = case.resolve(as_=as_)
        assert r["ok"] and r["name"] == ALIGNED, r
        assert case.verify(as_=as_).returncode == 0
        noop = case.build(as_=as_)
        assert noop.returncode == 0 and "up to date 2" in noop.stdout, noop.stdout + noop.stderr
        more = case.kf("build", "--cache", str(root), "--arch", ARCH, "--only",
                       "quantize.mxfp8.floor.swizzled.bfloat16.aligned.*.t128u1", as_=as_)
        assert more.returncode == 2 and "is not writable" in more.stderr, more.stdout + more.stderr
        for cmd in (["clean", "--all"], ["repair"]):
            res = case.kf("cache", *cmd, "--cache", str(root), as_=as_)
            assert res.returncode == 2 and "is not writable" in res.stderr, res.stdout + res.stderr
        assert sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*")) == snapshot, "something was written"
    finally:
        for p in [shared, *shared.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(shared)


# ---- 3. symlinks ----

def test_symlinked_module_is_never_followed(case: Case, evil_so: Path) -> None:
    module = case.entry_dir(ALIGNED) / "module.so"
    module.unlink()
    module.symlink_to(evil_so)
    r = case.resolve()
    assert not r["ok"] and r["type"] == "UntrustedCache" and "symlink" in r["message"], r
    v = case.verify()
    assert v.returncode == 1 and "symlink" in v.stdout
    b = case.build("--verify")
    assert b.returncode == 0 and f"replaced damaged entry {ALIGNED}" in b.stdout, b.stdout + b.stderr
    case.assert_healthy()


# ---- 4. index loss ----

@pytest.mark.parametrize("damage", ["truncated", "garbage", "deleted"])
def test_index_loss_loses_nothing(case: Case, damage: str) -> None:
    text = case.index_path.read_text()
    if damage == "truncated":
        case.index_path.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        case.index_path.write_bytes(os.urandom(len(text)))
    else:
        case.index_path.unlink()
    r = case.resolve()
    assert not r["ok"] and ("cache repair" in r["message"] or damage == "deleted"), r
    v = case.verify()
    assert v.returncode == 1 and ("unusable index" in v.stdout or "entry not in the index" in v.stdout), v.stdout
    c = case.kf("cache", "clean", "--cache", str(case.root))
    assert set(case.before) <= set(case.shas()), "clean deleted intact entries the index lost"
    if damage != "deleted":
        assert c.returncode in (0, 2)
    rep = case.kf("cache", "repair", "--cache", str(case.root))
    assert rep.returncode == 0 and "quarantined" not in rep.stdout.replace("0 quarantined", ""), rep.stdout
    case.assert_healthy()


def test_build_adopts_entries_the_index_lost(case: Case) -> None:
    case.index_path.unlink()
    b = case.build()
    assert b.returncode == 0 and "built 0" in b.stdout, b.stdout + b.stderr  # re-indexed, nothing compiled
    case.assert_healthy()


# ---- 5. clean --stale and runtime libraries ----

def test_clean_stale_keeps_a_runtime_library_that_kernels_link(case: Case) -> None:
    from kernelforge.build.toolchain import current_toolchain_id
    from kernelforge.cache import CacheStore, clean

    rkey = case.runtime_key()
    entries = case.index()
    entries[rkey]["toolchain_id"] = "an-older-toolchain"  # its key did not change, its toolchain id did
    meta = case.root / "v1" / entries[rkey]["path"] / "meta.json"
    meta.write_text(json.dumps(entries[rkey], indent=1, sort_keys=True))
    case.write_index(entries)
    report = clean(CacheStore(case.root), keep_toolchain_id=current_toolchain_id())
    assert rkey not in report.removed
    case.assert_healthy()


# ---- 6. corrupted modules: fallback, then the command the error names ----

def test_corrupt_module_falls_back_and_the_named_command_heals(case: Case) -> None:
    for name in (ALIGNED, ANY):
        module = case.entry_dir(name) / "module.so"
        data = bytearray(module.read_bytes())
        data[len(data) // 2] ^= 0xFF
        module.write_bytes(bytes(data))
        r = case.resolve()
        if name == ALIGNED:
            assert r["ok"] and r["name"] == ANY and len(r["warnings"]) == 1, r
    assert not r["ok"] and r["type"] == "CorruptArtifact", r
    command = r["message"].split("fix: ", 1)[1]
    assert command.startswith("kernelforge build --verify")
    b = case.kf(*command.split()[1:] + ["--only", SELECTION])  # the command, widened to both variants
    assert b.returncode == 0, b.stdout + b.stderr
    case.assert_healthy()


# ---- 7. bad roots ----

def test_cache_root_that_is_a_file_or_missing(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for root, what in ((f, "is not a directory"), (tmp_path / "misspelled", "does not exist")):
        v = subprocess.run(kf_cmd("cache", "verify", "--cache", str(root)), capture_output=True, text=True,
                           env=cli_env())
        assert v.returncode == 2 and what in v.stderr and "Traceback" not in v.stderr, v.stdout + v.stderr
    b = subprocess.run(kf_cmd("build", "--cache", str(f / "sub"), "--arch", ARCH, "--only", SELECTION),
                       capture_output=True, text=True, env=cli_env())
    assert b.returncode == 2 and "not a directory" in b.stderr and "Traceback" not in b.stderr, b.stdout + b.stderr


# ---- 8. a full disk ----

def test_full_disk_fails_cleanly(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs CAP_SYS_ADMIN)")
    try:
        root = mnt / "cache"
        b = subprocess.run(kf_cmd("build", "--cache", str(root), "--arch", ARCH, "--only", SELECTION, "-j", "2"),
                           capture_output=True, text=True, env=cli_env())
        assert b.returncode != 0 and "Traceback" not in b.stderr + b.stdout, b.stdout + b.stderr
        assert "No space left" in b.stdout + b.stderr
        v = subprocess.run(kf_cmd("cache", "verify", "--cache", str(root)), capture_output=True, text=True,
                           env=cli_env())
        assert v.returncode in (0, 2) and "PROBLEM" not in v.stdout, v.stdout  # nothing half-published
        tmp = root / "v1" / "tmp"
        assert not tmp.is_dir() or not [p for p in tmp.iterdir() if p.name.startswith("stage-")]
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
