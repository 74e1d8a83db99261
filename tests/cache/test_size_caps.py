"""Archives and remotes are bounded: a bundle member, an entry file or a remote blob larger than
$KERNELFORGE_MAX_ARTIFACT_BYTES (an index larger than $KERNELFORGE_MAX_INDEX_BYTES) is refused from
its declared size (tar header, entry metadata) before it is read. The tests lower the caps through
the environment so that the files stay small."""
from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from kernelforge.cache import CacheStore
from kernelforge.cache.transfer.bundle import BUNDLE_INDEX, export_bundle
from tests.cache import _cache_helpers as h
from tests.cache._fault_helpers import error_lines, fake_cache, kf

MiB = 2**20
CAP = {"KERNELFORGE_MAX_ARTIFACT_BYTES": str(MiB)}


@pytest.fixture
def big_cache(tmp_path: Path) -> tuple[Path, dict]:
    """Two small entries and one whose module.so is 2 MiB (over the lowered 1 MiB cap)."""
    root = tmp_path / "cache"
    entries = fake_cache(root, ("a", "b"))
    store = CacheStore(root)
    entry, _ = store.get_or_build(h.key_of("big"), h.fake_build(b"\x01" * (2 * MiB), name="big"))
    return root, {**entries, "big": entry}


def _names(root: Path) -> set[str]:
    index = root / "v1" / "index.json"
    return {e["name"] for e in json.loads(index.read_text())["entries"].values()} if index.exists() else set()


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar"])
def test_import_refuses_a_member_over_the_cap_in_one_line(big_cache, tmp_path: Path, suffix: str) -> None:
    root, entries = big_cache
    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(CacheStore(root), bundle).ok  # the default cap (256 MiB) exports it
    if suffix == ".tar":
        plain = tmp_path / "b.tar"
        plain.write_bytes(gzip.decompress(bundle.read_bytes()))
        bundle = plain
    dest = tmp_path / "dest"
    proc = kf("cache", "import", str(bundle), "--cache", str(dest), env=CAP)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    member = f"v1/{entries['big'].path}/module.so"
    assert error_lines(proc) == [
        f"error: bundle {bundle} is unsafe: member {member!r} is {2 * MiB} bytes, over the limit of {MiB} bytes "
        "($KERNELFORGE_MAX_ARTIFACT_BYTES sets it); nothing was imported"], proc.stderr
    assert _names(dest) == set()
    assert kf("cache", "import", str(bundle), "--cache", str(dest)).returncode == 0  # the default cap takes it
    assert _names(dest) == {"a", "b", "big"}


def _lying_bundle(path: Path, claimed: int, index: bytes) -> None:
    """A gzip tar whose member header claims `claimed` bytes, followed by 64 KiB of data and nothing
    else: an importer that trusts the header would try to read (and allocate) all of it."""
    raw = io.BytesIO()
    info = tarfile.TarInfo(BUNDLE_INDEX)
    info.size = len(index)
    raw.write(info.tobuf(format=tarfile.PAX_FORMAT))
    raw.write(index + b"\0" * (-len(index) % 512))
    info = tarfile.TarInfo("v1/artifacts/aa/" + "a" * 64 + "/module.so")
    info.size = claimed
    raw.write(info.tobuf(format=tarfile.PAX_FORMAT))
    raw.write(b"\0" * (64 * 1024))
    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))


def test_a_tar_header_claiming_a_huge_member_is_refused_before_reading(tmp_path: Path) -> None:
    bundle = tmp_path / "lie.tar.gz"
    index = json.dumps({"schema": 1, "format": "kernelforge-bundle", "entries": {}}).encode()
    _lying_bundle(bundle, 8 * 2**30, index)
    proc = kf("cache", "import", str(bundle), "--cache", str(tmp_path / "dest"))  # the default cap: 256 MiB
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert error_lines(proc) == [
        f"error: bundle {bundle} is unsafe: member 'v1/artifacts/aa/{'a' * 64}/module.so' is {8 * 2**30} bytes, "
        f"over the limit of {256 * MiB} bytes ($KERNELFORGE_MAX_ARTIFACT_BYTES sets it); nothing was imported"]


def _padded(path: Path, size: int) -> None:
    """Pad a JSON file with trailing whitespace (still the same JSON) to `size` bytes."""
    data = path.read_bytes()
    path.write_bytes(data + b" " * (size - len(data)))


def test_a_bundle_index_over_its_cap_is_refused(big_cache, tmp_path: Path) -> None:
    import gzip
    import io
    import tarfile

    root, _ = big_cache
    bundle = tmp_path / "b.tar.gz"
    assert export_bundle(CacheStore(root), bundle, only=["a"]).ok
    padded = tmp_path / "padded.tar.gz"  # the same bundle, its index padded past the smallest cap
    with tarfile.open(bundle) as src, gzip.open(padded, "wb") as gz, tarfile.open(fileobj=gz, mode="w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isreg() else b""
            if member.name == BUNDLE_INDEX:
                data += b" " * (MiB + 1 - len(data))
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    proc = kf("cache", "import", str(padded), "--cache", str(tmp_path / "dest"),
              env={"KERNELFORGE_MAX_INDEX_BYTES": "1MiB"})
    assert proc.returncode == 1
    assert len(error_lines(proc)) == 1 and f"member '{BUNDLE_INDEX}' is" in proc.stderr
    assert f"over the limit of {MiB} bytes ($KERNELFORGE_MAX_INDEX_BYTES sets it)" in proc.stderr


def test_a_remote_entry_declaring_a_file_over_the_cap_is_refused_without_download(big_cache, tmp_path, monkeypatch):
    from kernelforge.cache.transfer import remote as remote_mod

    root, entries = big_cache
    url = f"file://{tmp_path / 'remote'}"
    assert remote_mod.push(CacheStore(root), url).ok
    monkeypatch.setenv("KERNELFORGE_MAX_ARTIFACT_BYTES", str(MiB))
    read: list[str] = []
    real = remote_mod.Remote.read

    def spy(self, path, what, *a, **kw):
        read.append(path)
        return real(self, path, what, *a, **kw)

    monkeypatch.setattr(remote_mod.Remote, "read", spy)
    dest = CacheStore(tmp_path / "dest")
    report = remote_mod.pull(dest, url)
    assert [r.name for r in report.refused] == ["big"]
    assert f"declares {2 * MiB} bytes, over the limit of {MiB} bytes" in report.refused[0].reason
    assert not [p for p in read if entries["big"].sha256 in p], "the oversized blob was downloaded"
    assert sorted(report.transferred) == ["a", "b"]


def test_a_remote_blob_larger_than_recorded_is_read_no_further(tmp_path: Path, monkeypatch) -> None:
    """memory:// takes the object-store path (a ranged read of the recorded size and one byte more)."""
    from kernelforge.cache.transfer import remote as remote_mod

    root = tmp_path / "cache"
    entries = fake_cache(root, ("a", "b"))
    url = "memory://kf-size-caps"
    assert remote_mod.push(CacheStore(root), url).ok
    r = remote_mod.Remote(url)
    sha = entries["a"].sha256
    r.fs.pipe_file(r.blob_path(sha), b"x" * (2 * MiB))  # swapped for a larger object
    ranges: list[tuple] = []
    real = r.fs.__class__.cat_file

    def spy(self, path, start=None, end=None, **kw):
        ranges.append((path, start, end))
        return real(self, path, start=start, end=end, **kw)

    monkeypatch.setattr(r.fs.__class__, "cat_file", spy)
    report = remote_mod.pull(CacheStore(tmp_path / "dest"), url)
    assert [x.name for x in report.refused] == ["a"] and "holds more than" in report.refused[0].reason
    blob_reads = [rng for rng in ranges if sha in rng[0]]
    assert blob_reads == [(r.blob_path(sha), 0, entries["a"].files["module.so"]["size"] + 1)]
    r.fs.rm(r.root, recursive=True)


def test_a_remote_index_over_its_cap_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    fake_cache(root, ("a",))
    url = f"file://{tmp_path / 'remote'}"
    assert kf("cache", "push", url, "--cache", str(root)).returncode == 0
    _padded(tmp_path / "remote" / "v1" / "remote-index.json", MiB + 1)
    proc = kf("cache", "pull", url, "--cache", str(tmp_path / "dest"), env={"KERNELFORGE_MAX_INDEX_BYTES": "1MiB"})
    assert proc.returncode == 1
    assert len(error_lines(proc)) == 1 and "remote-index.json is" in proc.stderr
    assert f"over the limit of {MiB} bytes ($KERNELFORGE_MAX_INDEX_BYTES sets it)" in proc.stderr


def test_merge_refuses_an_entry_over_the_cap(big_cache, tmp_path: Path) -> None:
    root, _ = big_cache
    proc = kf("cache", "merge", str(root), "--cache", str(tmp_path / "dest"), env=CAP)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert len(refused) == 1 and "big [" in refused[0] and f"over the limit of {MiB} bytes" in refused[0]
    assert _names(tmp_path / "dest") == {"a", "b"}


@pytest.mark.parametrize("value", ["lots", "0", "-5", "10", "1023KiB"])
def test_an_unusable_cap_is_one_line_exit_2(tmp_path: Path, value: str) -> None:
    proc = kf("cache", "verify", "--cache", str(tmp_path), env={"KERNELFORGE_MAX_ARTIFACT_BYTES": value})
    assert proc.returncode == 2
    assert error_lines(proc) == [f"error: $KERNELFORGE_MAX_ARTIFACT_BYTES={value!r}: expected a size of at least "
                                 "1MiB (e.g. 268435456, 256MiB, 1G)"]


def test_s3_blobs_are_read_with_a_bounded_range_empty_ones_too(tmp_path: Path, s3_remote) -> None:
    """On a real S3 API (moto): a blob larger than its record is refused after size + 1 bytes; an empty
    file (a ranged read of an empty object is an error on S3) still round-trips."""
    root = tmp_path / "cache"
    store = CacheStore(root)

    def build(staging: Path) -> dict:
        (staging / "module.so").write_bytes(b"m" * 100)
        (staging / "empty.txt").write_bytes(b"")
        return h.meta(name="with-empty")

    entry, _ = store.get_or_build(h.key_of("with-empty"), build)
    fake_cache(root, ("a",))
    push = kf("cache", "push", s3_remote.url, "--cache", str(root), env=s3_remote.env)
    assert push.returncode == 0, push.stdout + push.stderr
    a = CacheStore(root).get(h.key_of("a"))
    s3_remote.put(f"v1/blobs/{a.sha256[:2]}/{a.sha256}", b"x" * (2 * MiB))
    pull = kf("cache", "pull", s3_remote.url, "--cache", str(tmp_path / "dest"), env=s3_remote.env)
    assert pull.returncode == 1, pull.stdout + pull.stderr
    refused = [line for line in pull.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert len(refused) == 1 and "a [" in refused[0] and "holds more than" in refused[0], pull.stdout
    assert _names(tmp_path / "dest") == {"with-empty"}
    assert (tmp_path / "dest" / "v1" / entry.path / "empty.txt").read_bytes() == b""
