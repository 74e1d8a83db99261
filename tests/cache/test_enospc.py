"""A full disk in the middle of a build, a merge, an import and a package: one line (no traceback), a
documented non-zero exit code, a destination cache that verifies (or that `cache repair` restores
with no intact entry lost), and nothing lost in the source. The destination is a real 2 MiB tmpfs
(mounted as root; skipped with the reason where that is not possible)."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from kernelforge.cache import CacheStore
from kernelforge.cache.transfer.bundle import export_bundle
from tests.cache import _cache_helpers as h
from tests.cache._fault_helpers import error_lines, fake_cache, kf, tree_digests

KiB = 1024


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the block (unmounted in a finally)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root and mount(8) to mount a small tmpfs (a disk that fills up)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(path: Path, leave_pages: int = 0) -> Path:
    """Fill the filesystem of `path` with a ballast file, then free `leave_pages` 4 KiB pages of it."""
    ballast = path / "ballast"
    with open(ballast, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (64 * KiB))
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    size = ballast.stat().st_size
    os.truncate(ballast, max(0, (size // 4096 - leave_pages) * 4096))
    return ballast


def _assert_restorable(root: Path, must_keep: dict[str, bytes]) -> None:
    """The cache verifies, or `cache repair` makes it verify; every file of `must_keep` is still there."""
    v = kf("cache", "verify", "--cache", str(root))
    if v.returncode != 0:
        assert v.returncode == 1, v.stdout + v.stderr
        assert "entry not in the index" in v.stdout or "debris" in v.stdout, v.stdout
        assert kf("cache", "repair", "--cache", str(root)).returncode == 0
        assert kf("cache", "verify", "--cache", str(root)).returncode == 0
    now = tree_digests(root)
    assert {k: now.get(k) for k in must_keep} == must_keep, "an intact entry was lost"


# ---- build (the store's get_or_build, the path every compile publishes through) ----

@pytest.mark.parametrize("leave_pages", [None, 0, 1], ids=["module", "meta", "index"])
def test_build_runs_out_of_space(tmp_path: Path, leave_pages) -> None:
    """None: the module itself does not fit; 0: the disk fills before publish writes meta.json;
    1: meta.json fits, the index write does not (the entry is in place but not indexed)."""
    with tmpfs(tmp_path / "fs") as fs:
        root = fs / "cache"
        fake_cache(root, ("a", "b"), payload=10 * KiB)
        before = tree_digests(root)
        store = CacheStore(root)
        ballast = None

        def build(staging: Path) -> dict:
            nonlocal ballast
            if leave_pages is None:
                (staging / "module.so").write_bytes(os.urandom(3 * 2**20))  # larger than the disk
            else:
                (staging / "module.so").write_bytes(b"m" * 100)
                ballast = _fill(fs, leave_pages)
            return h.meta(name="big")

        with pytest.raises(OSError) as info:
            store.get_or_build(h.key_of("big"), build)
        assert info.value.errno == errno.ENOSPC
        if ballast is not None:
            ballast.unlink()
        assert not [p for p in (root / "v1" / "tmp").iterdir() if p.name.startswith("stage-")]  # no debris
        _assert_restorable(root, before)
        entry, built = store.get_or_build(h.key_of("small"), h.fake_build(name="small"))  # works again
        assert built and kf("cache", "verify", "--cache", str(root)).returncode == 0


# ---- merge, import: many entries into a disk that holds a few ----

def _arrived_whole(dest: Path, before: dict[str, bytes]) -> bool:
    """Every file of the source that arrived has its bytes (meta.json differs: arrival time, origin)."""
    return all(before[k] == v for k, v in tree_digests(dest).items() if k in before and not k.endswith("meta.json"))


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "src"
    fake_cache(root, tuple(f"e{i}" for i in range(8)), payload=200 * KiB)  # 8 x 400 KiB (name * payload)
    return root, tree_digests(root)


def test_merge_runs_out_of_space(tmp_path: Path, source) -> None:
    src, before = source
    with tmpfs(tmp_path / "fs") as fs:
        dest = fs / "cache"
        fake_cache(dest, ("own",), payload=KiB)
        own = tree_digests(dest)
        proc = kf("cache", "merge", str(src), "--cache", str(dest))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = error_lines(proc)
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot write the destination cache {dest}: no space "
                                                       "left on the device"), lines
        _assert_restorable(dest, own)
        assert _arrived_whole(dest, before)
    assert tree_digests(src) == before and kf("cache", "verify", "--cache", str(src)).returncode == 0


@pytest.mark.parametrize("entries,where", [(8, "spool"), (3, "publish")])
def test_import_runs_out_of_space(tmp_path: Path, source, entries: int, where: str) -> None:
    """8 entries: the decompressed bundle itself does not fit; 3: it does, the entries stop fitting midway."""
    src, before = source
    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(CacheStore(src), bundle, only=[f"e{i}" for i in range(entries)]).ok
    with tmpfs(tmp_path / "fs") as fs:
        dest = fs / "cache"
        fake_cache(dest, ("own",), payload=KiB)
        own = tree_digests(dest)
        proc = kf("cache", "import", str(bundle), "--cache", str(dest))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = error_lines(proc)
        assert len(lines) == 1 and "no space left on the device" in lines[0], lines
        if where == "spool":
            assert "decompressed copy" in lines[0] and "nothing was imported" in lines[0], lines
        else:
            assert lines[0].startswith(f"error: import of bundle {bundle} stopped: cannot write the cache"), lines
        _assert_restorable(dest, own)
        assert _arrived_whole(dest, before)
        assert not list((dest / "v1" / "tmp").glob("stage-*"))
    assert tree_digests(src) == before


def test_package_runs_out_of_space(tmp_path: Path) -> None:
    from tests.release._kernel_cache import built_cache, skip_reason

    if skip_reason():
        pytest.skip(skip_reason())
    cache = tmp_path / "cache"
    shutil.copytree(built_cache(), cache)
    before = tree_digests(cache)
    with tmpfs(tmp_path / "fs", "100k") as fs:  # the wheel (~0.2 MiB compressed) does not fit
        proc = kf("package", "--cache", str(cache), "--out", str(fs / "dist"),
                  env={"KERNELFORGE_ALLOW_UNSIGNED": "*"})
        assert proc.returncode in (1, 2), proc.stdout + proc.stderr
        lines = error_lines(proc)
        assert len(lines) == 1 and "no space left" in lines[0].lower(), lines
        assert not list((fs / "dist").glob("*.whl")) and not list((fs / "dist").glob(".wheel-*"))
    assert tree_digests(cache) == before and kf("cache", "verify", "--cache", str(cache)).returncode == 0
