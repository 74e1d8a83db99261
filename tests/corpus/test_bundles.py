"""Bundles (kernelforge/cache/transfer/bundle.py member_problem, import_bundle): tar archives built from a
real export of a crafted cache with members renamed, retyped (links, devices, FIFOs, directories),
re-sized, dropped, duplicated or rewritten, the bundle index replaced, the stream truncated or
gzipped. Every archive is imported or refused (Rejected / TransferError, or entries refused in the
report): never another exception, nothing written outside the cache root, and a refused bundle
leaves the destination's entries as they were."""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelforge.cache import CacheStore
from kernelforge.cache.transfer.bundle import BUNDLE_INDEX, export_bundle, import_bundle, member_problem
from kernelforge.cache.transfer.provenance import Authority
from kernelforge.errors import CacheError
from tests.cli._crafted import crafted_cache, publish
from tests.corpus._corpus import Hang, corpus_settings, count, problem, time_limit

# Hostile inputs make the product warn (an unreadable index, ...): expected here, not reported.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = "bundles"
TYPES = {"reg": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "lnk": tarfile.LNKTYPE,
         "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE, "cont": tarfile.CONTTYPE}
NAMES = ["/etc/passwd", "../escape", "v1/../../escape", "v1/artifacts/../../x", "v1/artifacts/aa/" + "a" * 64 + "/../b",
         "./" + BUNDLE_INDEX, "v1/artifacts/aa", "v1/runtime/" + "r" * 64 + "/lib.so", "v1/signatures/" + "0" * 64 + ".json",
         "v1/tmp/x", "v1/index.json", "\u00e9/\u4e2d", "v1/artifacts/aa/" + "a" * 300 + "/module.so", "", ".", "v1",
         "v1/artifacts/aa/" + "a" * 64 + "/.hidden", "v1//artifacts", "C:\\x", "v1/artifacts/aa/" + "a" * 64 + "/meta.json"]

INDEX_KEYS = ["schema", "format", "entries", "files", "main_file", "path", "kind", "key", "name", "arch", "extra",
              "variant", "created", "toolchain_id", "build_time_s", ""]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[tarfile.TarInfo, bytes]]:
    """The members of a real bundle of the crafted cache: (info, bytes), in order."""
    tmp = tmp_path_factory.mktemp("bundle-template")
    store = crafted_cache(tmp / "c" / "cache")
    export_bundle(store, tmp / "b.tar.gz")
    with tarfile.open(tmp / "b.tar.gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar.getmembers()]


@st.composite
def edits(draw) -> list[tuple[str, Any]]:
    """1-4 edits of the template's member list (applied in `build`), and how the stream is written."""
    out = []
    for _ in range(draw(st.sampled_from([1, 1, 2, 3, 4]))):
        # unsafe names and types reject a whole bundle: drawn less often than edits refused per entry
        op = draw(st.sampled_from(["rename", "retype", "add", "drop", "drop", "dup", "bytes", "bytes", "size",
                                   "index", "index", "mode"]))
        out.append((op, (draw(st.integers(0, 30)), draw(st.sampled_from(NAMES)), draw(st.sampled_from(list(TYPES))),
                         draw(st.binary(max_size=64)), draw(st.integers(-5, 2**40)),
                         draw(st.one_of(st.none(), st.integers(), st.text(max_size=10),
                                        st.lists(st.integers(), max_size=2),
                                        st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))))))
    out.append(("stream", draw(st.sampled_from(["gz"] * 4 + ["plain"] * 2 + ["truncated", "gz-truncated",
                                                                          "garbage-tail"]))))
    return out


def build(template: list[tuple[tarfile.TarInfo, bytes]], ops: list[tuple[str, Any]]) -> bytes:
    members = [(tarfile.TarInfo(m.name), m, data) for m, data in template]
    members = [(_copy(m), data) for _, m, data in members]
    stream = "gz"
    for op, arg in ops:
        if op == "stream":
            stream = arg
            continue
        i, name, kind, data, size, value = arg
        if not members:
            break
        i %= len(members)
        info, payload = members[i]
        if op == "rename":
            info.name = name
        elif op == "retype":
            info.type = TYPES[kind]
            info.linkname = name or "v1"
        elif op == "drop":
            del members[i]
        elif op == "dup":
            members.insert(i, (_copy(info), payload))
        elif op == "bytes":
            info.size = len(data)
            members[i] = (info, data)
        elif op == "size":
            info.size = size  # the header lies about the member's size (addfile writes what it says)
        elif op == "mode":
            info.mode = abs(size) & 0o7777
        elif op == "index":
            doc = json.loads(template[0][1])
            key = next(iter(doc["entries"]), "x")
            where = [doc, doc["entries"], doc["entries"].get(key, {})][i % 3]
            if isinstance(where, dict):
                where[INDEX_KEYS[abs(size) % len(INDEX_KEYS)]] = value
            payload = json.dumps(doc).encode()
            members[0][0].size = len(payload)
            members[0] = (members[0][0], payload)
        elif op == "add":
            new = tarfile.TarInfo(name)
            new.type, new.linkname = TYPES[kind], "v1"
            members.insert(i, (new, data))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, payload in members:
            if info.isreg() or info.type == tarfile.CONTTYPE:
                fitted = payload[:max(info.size, 0)].ljust(max(info.size, 0), b"\0") if info.size < 1 << 20 else payload
                if info.size >= 1 << 20:
                    info.size = len(payload)  # tarfile cannot write a lying header past the data
                else:
                    info.size = len(fitted)
                tar.addfile(info, io.BytesIO(fitted))
            else:
                info.size = 0
                tar.addfile(info)
    data = raw.getvalue()
    if stream == "plain":
        return data
    if stream == "truncated":
        return data[:len(data) // 2]
    if stream == "garbage-tail":
        return gzip.compress(data) + b"\x00garbage"
    packed = gzip.compress(data, mtime=0)
    return packed[:len(packed) * 2 // 3] if stream == "gz-truncated" else packed


def _copy(m: tarfile.TarInfo) -> tarfile.TarInfo:
    c = tarfile.TarInfo(m.name)
    c.size, c.mtime, c.mode, c.type, c.linkname, c.uid, c.gid = m.size, m.mtime, m.mode, m.type, m.linkname, 0, 0
    return c


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and not p.is_symlink()}


def check_bundle(data: bytes, given_: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kf-corpus-bundle-"))
    t0 = time.monotonic()
    outcome = "?"
    try:
        os.chmod(tmp, 0o755)
        dest = CacheStore(tmp / "dest")
        publish(dest, "s" * 64, kind="runtime", size=100)
        publish(dest, "e" * 64, payload=b"the destination's own entry")
        before = dest.index(fresh=True)
        outside = tmp / "outside"
        outside.mkdir()
        path = tmp / "bundle.tar.gz"
        path.write_bytes(data)
        with time_limit(20):
            try:
                with tarfile.open(path) as tar:
                    for member in tar.getmembers():
                        got = member_problem(member, tmp / "dest" / "v1" / "tmp" / "check")
                        assert got is None or isinstance(got, str), got
            except (tarfile.TarError, OSError, EOFError, ValueError):
                pass  # not a readable archive: import_bundle must refuse it on its own
            try:
                report = import_bundle(dest, path, authority=Authority.configured(None, True))
                outcome = "imported" if report.ok else "entries refused"
            except CacheError as exc:  # Rejected, TransferError
                assert str(exc), problem(TARGET, "wrong error", given_, f"{type(exc).__name__} without a message")
                after = dest.index(fresh=True)
                assert set(after) == set(before), problem(TARGET, "bad output", given_,
                                                          f"a refused bundle changed the index: {exc}")
                outcome = type(exc).__name__
        after = dest.index(fresh=True)
        lost = [k for k, e in before.items() if k not in after or after[k].files != e.files]
        assert not lost, problem(TARGET, "data loss", given_, f"entries lost or changed: {lost}")
        stray = sorted(p.name for p in tmp.iterdir()) != sorted(["dest", "outside", "bundle.tar.gz"])
        assert not stray and not any(outside.iterdir()), problem(TARGET, "bad output", given_,
                                                                  f"wrote outside the cache: {list(tmp.iterdir())}")
    except Hang as exc:
        raise AssertionError(problem(TARGET, "hang", given_, str(exc))) from None
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(problem(TARGET, "traceback", given_, f"{type(exc).__name__}: {exc}")) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    count(TARGET, outcome, time.monotonic() - t0)


@corpus_settings(max_examples=150, deadline_s=20)
@given(ops=edits())
def test_edited_bundles(template, ops) -> None:
    check_bundle(build(template, ops), repr(ops))


@corpus_settings(max_examples=30, deadline_s=20)
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    check_bundle(data, repr(data[:200]))


def test_the_unedited_template_imports(template) -> None:
    """The corpus's base archive is a good bundle (so edits start from one that imports)."""
    check_bundle(build(template, [("stream", "gz")]), "template")
    tmp = Path(tempfile.mkdtemp(prefix="kf-corpus-bundle-"))
    try:
        (tmp / "b.tar.gz").write_bytes(build(template, [("stream", "gz")]))
        report = import_bundle(CacheStore(tmp / "c"), tmp / "b.tar.gz", authority=Authority.configured(None, True))
        assert report.ok and len(report.transferred) == 5, report.to_dict()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
