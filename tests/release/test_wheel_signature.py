"""Installed kernel wheels are served only when a trusted key signed them (SIGNATURE.json), or the
user allowed that distribution unsigned; a signed wheel whose files were swapped is refused.
Real wheels of a small real build, unpacked the way pip lays them out."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from kernelforge.cache.read.signing import generate_key, load_signing_key
from tests.build._kf_build_helpers import ARCH
from tests.release._kernel_cache import built_or_skip

pytestmark = pytest.mark.slow
DIST = "kernelforge-kernels-" + ARCH.replace("_", "")


@pytest.fixture(scope="module")
def built() -> Path:
    return built_or_skip()


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    generate_key(tmp_path / "release")
    generate_key(tmp_path / "attacker")
    monkeypatch.delenv("KERNELFORGE_ALLOW_UNSIGNED", raising=False)
    monkeypatch.setenv("KERNELFORGE_TRUSTED_KEYS", str(tmp_path / "release.pub"))
    return load_signing_key(tmp_path / "release"), load_signing_key(tmp_path / "attacker")


def _installed(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signer, name: str = "site") -> Path:
    """Package the built cache (signed by `signer`, or unsigned), unpack it into a site dir on
    sys.path; return the package dir."""
    from kernelforge.cache import CacheStore
    from kernelforge.release.kernels import package_arch

    [wheel] = package_arch(CacheStore(built), ARCH, tmp_path / f"dist-{name}", signer=signer)
    site = tmp_path / name
    with zipfile.ZipFile(wheel.path) as zf:
        zf.extractall(site)
    monkeypatch.syspath_prepend(str(site))
    return site / DIST.replace("-", "_")


def _layer(package: Path):
    from kernelforge.cache.read.layers import wheel_layers

    [layer] = [x for x in wheel_layers() if x.root.parent == package]
    return layer


def test_a_signed_wheel_is_served_and_names_its_signer(built, tmp_path, monkeypatch, keys) -> None:
    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    layer = _layer(package)
    assert layer.refused is None and layer.signer == release.public.key_id
    from kernelforge.cache.maintenance.verification import verify_layer

    assert verify_layer(layer).ok


def test_an_unsigned_wheel_is_refused_unless_its_distribution_is_allowed(built, tmp_path, monkeypatch, keys) -> None:
    package = _installed(built, tmp_path, monkeypatch, None)
    layer = _layer(package)
    assert layer.refused is not None and "unsigned" in layer.refused
    monkeypatch.setenv("KERNELFORGE_ALLOW_UNSIGNED", "some-other-dist")
    assert _layer(package).refused is not None
    monkeypatch.setenv("KERNELFORGE_ALLOW_UNSIGNED", DIST)
    layer = _layer(package)
    assert layer.refused is None and layer.signer is None


def test_a_wheel_signed_by_an_untrusted_key_is_refused(built, tmp_path, monkeypatch, keys) -> None:
    _, attacker = keys
    layer = _layer(_installed(built, tmp_path, monkeypatch, attacker))
    assert layer.refused is not None and "not trusted" in layer.refused


def _rewrite_manifest_consistently(package: Path) -> None:
    """Point one group at other rows and recompute the manifest: what an attacker must do to make
    the runtime load another module from a signed wheel."""
    manifest_path = package / "cache" / "v1" / "dispatch" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    group, name = next(iter(manifest["groups"].items()))
    group_path = manifest_path.parent / "groups" / name
    payload = json.loads(group_path.read_text())
    payload["entries"][0]["sha256"] = hashlib.sha256(b"planted").hexdigest()
    data = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    new_name = hashlib.sha256(data).hexdigest()[:24] + ".json"
    (group_path.parent / new_name).write_bytes(data)
    manifest["groups"][group] = new_name
    manifest_path.write_text(json.dumps(manifest, separators=(",", ":"), sort_keys=True))


@pytest.mark.parametrize("tamper", ["manifest", "index", "sums", "signature"])
def test_a_signed_wheel_with_swapped_files_is_refused(built, tmp_path, monkeypatch, keys, tamper: str) -> None:
    release, attacker = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    if tamper == "manifest":
        _rewrite_manifest_consistently(package)
    elif tamper == "index":
        index = package / "cache" / "v1" / "index.json"
        index.write_bytes(index.read_bytes() + b" ")
    elif tamper == "sums":
        sums = package / "SHA256SUMS"
        sums.write_text(sums.read_text().replace("0", "1", 1))
    else:  # the attacker re-signs the genuine statement with their own key
        from kernelforge.cache.read.signing import sign_statement

        doc = json.loads((package / "SIGNATURE.json").read_text())
        statement = json.loads(doc["body"])["statement"]
        (package / "SIGNATURE.json").write_bytes(sign_statement(attacker, statement))
    layer = _layer(package)
    assert layer.refused is not None and ("does not hold" in layer.refused), layer.refused


def test_the_cli_shows_the_signer_and_refuses_in_one_line(built, tmp_path, monkeypatch, keys) -> None:
    from typer.testing import CliRunner

    from kernelforge.cli import app

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-user-cache"))
    r = CliRunner().invoke(app, ["cache", "verify"], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and f"signed by key {release.public.key_id}" in r.output, r.output
    (package / "SIGNATURE.json").unlink()
    r = CliRunner().invoke(app, ["cache", "verify"], env={"COLUMNS": "300"})
    assert r.exit_code == 1 and "unsigned" in r.output and "Traceback" not in r.output, r.output


# --- the verified-signature markers of the writable cache layer ----------------------------------

def _layer_with_memo(package: Path, memo_root: Path):
    from kernelforge.cache.read.layers import wheel_layers

    [layer] = [x for x in wheel_layers(memo_root) if x.root.parent == package]
    return layer


def _marker(package: Path, memo_root: Path) -> Path:
    from kernelforge.cache.read.wheel_signature import VERIFIED_DIR

    digest = hashlib.sha256((package / "SIGNATURE.json").read_bytes()).hexdigest()
    return memo_root / "v1" / VERIFIED_DIR / digest


def test_a_verified_signature_is_remembered_and_a_fresh_process_skips_cryptography(
        built, tmp_path, monkeypatch, keys) -> None:
    import os
    import subprocess
    import sys

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    memo = tmp_path / "user-cache"
    assert _layer_with_memo(package, memo).signer == release.public.key_id
    assert _marker(package, memo).is_file()
    # resolve_layers keeps its markers in the writable layer's root
    from kernelforge.cache.read import layers

    monkeypatch.setattr(layers, "resolve_cache_root", lambda _value=None: (tmp_path / "writable", "user"))
    assert [x.refused for x in layers.resolve_layers() if x.root.parent == package] == [None]
    assert not (tmp_path / "writable").exists()  # reports (ls, explain, verify) write nothing
    assert [x.refused for x in layers.resolve_layers(remember=True) if x.root.parent == package] == [None]
    assert _marker(package, tmp_path / "writable").is_file()
    # Two fresh processes on a new marker store: the first verifies (importing cryptography),
    # the second trusts the marker the first left.
    memo2 = tmp_path / "user-cache-2"
    code = ("import sys; from pathlib import Path; from kernelforge.cache.read.layers import wheel_layers; "
            f"[x] = [x for x in wheel_layers(Path({str(memo2)!r})) if x.root.parent == Path({str(package)!r})]; "
            "print(x.refused, x.signer, 'cryptography' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package.parent), *sys.path])}
    first, second = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                    cwd=tmp_path) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.split()[-3:] == ["None", release.public.key_id, "True"], first.stdout
    assert second.stdout.split()[-3:] == ["None", release.public.key_id, "False"], second.stdout


def test_a_marker_never_makes_an_untrusted_key_or_swapped_files_acceptable(built, tmp_path, monkeypatch,
                                                                           keys) -> None:
    from kernelforge.cache.read.signing import sign_statement

    release, attacker = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    memo = tmp_path / "user-cache"
    assert _layer_with_memo(package, memo).refused is None
    # the attacker's own valid signature of the genuine statement: remembered as verifying, and
    # still refused for its key
    genuine = (package / "SIGNATURE.json").read_bytes()
    doc = json.loads(genuine)
    (package / "SIGNATURE.json").write_bytes(sign_statement(attacker, json.loads(doc["body"])["statement"]))
    for _ in range(2):
        refused = _layer_with_memo(package, memo).refused
        assert refused is not None and "not trusted" in refused, refused
    # the genuine signature back (its marker kept), SHA256SUMS swapped: refused by the statement
    (package / "SIGNATURE.json").write_bytes(genuine)
    sums = package / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("0", "1", 1))
    assert _marker(package, memo).is_file()
    refused = _layer_with_memo(package, memo).refused
    assert refused is not None and "SHA256SUMS is not the one" in refused, refused


def test_a_marker_in_an_untrusted_directory_is_ignored(built, tmp_path, monkeypatch, keys) -> None:
    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    # a signature that does not verify (one byte of the signature changed), with a marker planted
    # for exactly these bytes in a group-writable directory
    doc = json.loads((package / "SIGNATURE.json").read_text())
    sig = bytearray(__import__("base64").b64decode(doc["signature"]))
    sig[0] ^= 1
    doc["signature"] = __import__("base64").b64encode(bytes(sig)).decode()
    (package / "SIGNATURE.json").write_bytes(json.dumps(doc).encode())
    memo = tmp_path / "shared-cache"
    marker = _marker(package, memo)
    marker.parent.mkdir(parents=True)
    marker.touch()
    marker.parent.chmod(0o777)
    refused = _layer_with_memo(package, memo).refused
    assert refused is not None and "does not verify" in refused, refused
    # without any marker store the same bytes are refused the same way
    refused = _layer(package).refused
    assert refused is not None and "does not verify" in refused, refused


def test_a_cache_that_cannot_hold_markers_changes_nothing(built, tmp_path, monkeypatch, keys) -> None:
    """A marker store that cannot be written (a plain file where its directory would be, a FIFO
    where the marker would be) never fails the layer: the signature is checked in full each time."""
    import os

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    blocked = tmp_path / "blocked"
    blocked.write_bytes(b"not a directory")
    for _ in range(2):
        layer = _layer_with_memo(package, blocked)
        assert (layer.refused, layer.signer) == (None, release.public.key_id)
    assert blocked.read_bytes() == b"not a directory"
    fifo_root = tmp_path / "fifo-cache"
    marker = _marker(package, fifo_root)
    marker.parent.mkdir(parents=True)
    os.mkfifo(marker)
    layer = _layer_with_memo(package, fifo_root)  # never opened: lstat says it is no regular file
    assert (layer.refused, layer.signer) == (None, release.public.key_id)
    # and a forged signature behind that FIFO is still refused
    doc = json.loads((package / "SIGNATURE.json").read_text())
    doc["signature"] = doc["signature"][:-4] + ("AAA=" if not doc["signature"].endswith("AAA=") else "BBB=")
    (package / "SIGNATURE.json").write_bytes(json.dumps(doc).encode())
    os.mkfifo(_marker(package, fifo_root))
    refused = _layer_with_memo(package, fifo_root).refused
    assert refused is not None and "does not verify" in refused, refused


# --- the runtime reads a signed wheel through its signed manifest alone -------------------------

def test_the_runtime_never_falls_back_to_a_signed_wheels_index(built, tmp_path, monkeypatch, keys) -> None:
    """The statement binds the index by generation and size only. An attacker who forges the index
    at the same generation and size (one module's sha256 swapped for a planted library's, the
    library and a matching meta.json put in the module's place) and damages that group's file, so that a reader falls back
    to the index, gets nothing loaded: the runtime serves that group from no file but the signed
    manifest's, and warns with the repair."""
    from kernelforge.cache.maintenance.verification import verify_layer
    from kernelforge.cache.read.layers import wheel_layers
    from kernelforge.cache.read.layout import Layout
    from kernelforge.runtime.dispatch import DispatchTable
    from kernelforge.runtime.layer_reader import LayerReader
    from kernelforge.runtime.loader import open_verified
    from tests._planted import planted_library

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    planted, marker = planted_library(tmp_path)
    views = package / "cache" / "v1" / "dispatch"
    manifest = json.loads((views / "manifest.json").read_text())
    (group, name), *_ = sorted(manifest["groups"].items())

    def runtime_layer():
        [layer] = [x for x in wheel_layers(tmp_path / "memo", full=False) if x.root.parent == package]
        assert layer.refused is None and layer.dispatch_manifest is not None
        return layer

    assert DispatchTable(layers=[runtime_layer()])._group(group), "the genuine wheel serves the group"
    [target, *_] = json.loads((views / "groups" / name).read_text())["entries"]
    index = package / "cache" / "v1" / "index.json"
    text = index.read_text()
    forged = text.replace(target["sha256"], hashlib.sha256(planted).hexdigest())
    assert forged != text and len(forged) == len(text)
    index.write_text(forged)
    entry_dir = package / "cache" / "v1" / Layout.entry_rel_of(target["key"], target["kind"])
    (entry_dir / target["main_file"]).write_bytes(planted)
    meta = json.loads((entry_dir / "meta.json").read_text())
    meta["files"][target["main_file"]] = {"sha256": hashlib.sha256(planted).hexdigest(), "size": len(planted)}
    (entry_dir / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    group_file = views / "groups" / name
    group_file.write_bytes(group_file.read_bytes()[:-1] + b" ")

    # The forgery is real: a reader that falls back to the index (the runtime's reader of a plain
    # cache directory) offers the planted library, and it passes the check the loader makes
    # before dlopen (the module's bytes against the sha256 its row names).
    layer = runtime_layer()
    plain = LayerReader(layer.root, layer.label)
    [bait] = [c for c in plain.group(group) if c.entry["key"] == target["key"]]
    assert bait.entry["sha256"] == hashlib.sha256(planted).hexdigest()
    os.close(open_verified(plain.trusted, bait.entry, "kernel module"))

    # The runtime's table over the same layer: nothing of that group and one warning naming the
    # repair; the library is never loaded.
    table = DispatchTable(layers=[layer])
    with pytest.warns(RuntimeWarning, match=r"does not match what the wheel's signature covers.*force-reinstall"):
        assert table._group(group) == []
    for cands in table.groups().values():
        for cand in cands:
            assert cand.entry["sha256"] != hashlib.sha256(planted).hexdigest()
    assert not marker.exists()
    # `cache verify`, the documented check after the reinstall, names the damage.
    assert not verify_layer(next(x for x in wheel_layers() if x.root.parent == package)).ok


def test_a_runtime_open_checks_less_than_a_report_and_both_refuse_a_swapped_manifest(
        built, tmp_path, monkeypatch, keys) -> None:
    """The runtime's open (full=False) skips SHA256SUMS, which it never reads; a report's open
    checks it. A swapped manifest is refused by both."""
    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    sums = package / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("0", "1", 1))

    def layer(full: bool):
        from kernelforge.cache.read.layers import wheel_layers

        [x] = [x for x in wheel_layers(tmp_path / "memo", full=full) if x.root.parent == package]
        return x

    assert layer(full=False).refused is None
    assert "SHA256SUMS is not the one" in (layer(full=True).refused or "")
    _rewrite_manifest_consistently(package)
    for full in (False, True):
        assert "dispatch/manifest.json is not the one" in (layer(full).refused or ""), full


# --- where the kernel wheels are, remembered per sys.path (cache/read/wheel_discovery.py) ------

def _records(memo: Path) -> list[Path]:
    from kernelforge.cache.read.wheel_discovery import RECORDS_DIR

    return sorted((memo / "v1" / RECORDS_DIR).glob("*.json"))


def _runtime_layers(memo: Path):
    from kernelforge.cache.read.layers import wheel_layers

    return wheel_layers(memo, full=False)


def test_the_wheels_found_are_remembered_and_the_record_spares_the_listing(built, tmp_path, monkeypatch,
                                                                           keys) -> None:
    from kernelforge.cache.read import installed, wheel_discovery

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    memo = tmp_path / "user-cache"
    # The site directory was just written: its times are too recent to be kept (the racy rule)...
    _runtime_layers(memo)
    [record] = _records(memo)
    entries = dict(zip(json.loads(record.read_text())["path"], json.loads(record.read_text())["entries"]))
    assert entries[str(package.parent)][0][2:] == [None, None]
    # ... unless the rule's window is closed, as it is for a site installed long ago.
    monkeypatch.setattr(wheel_discovery, "RACY_NS", 0)
    record.unlink()
    first = [(x.root, x.refused, x.signer) for x in _runtime_layers(memo)]
    assert (package / "cache", None, release.public.key_id) in first
    [record] = _records(memo)
    entries = dict(zip(json.loads(record.read_text())["path"], json.loads(record.read_text())["entries"]))
    assert None not in entries[str(package.parent)][0]
    # A second open lists no directory and opens the same signed layers.
    monkeypatch.setattr(installed, "dist_infos", lambda entry: pytest.fail(f"listed {entry} despite a valid record"))
    assert [(x.root, x.refused, x.signer) for x in _runtime_layers(memo)] == first
    # Reports list sys.path and write nothing.
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(package.parent))
    record.unlink()
    from kernelforge.cache.read.layers import wheel_layers

    assert any(x.root == package / "cache" for x in wheel_layers())
    assert _records(memo) == []


def test_a_changed_site_directory_is_listed_again(built, tmp_path, monkeypatch, keys) -> None:
    """Installing a kernel wheel into a directory already on sys.path, then removing it: the next
    open finds it, then no longer serves it, though a record of the earlier state exists."""
    release, _ = keys
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    memo = tmp_path / "user-cache"
    assert not any(x.root.is_relative_to(site) for x in _runtime_layers(memo))
    package = _installed(built, tmp_path, monkeypatch, release)  # unpacked into the same `site`
    assert package.parent == site
    assert [x.refused for x in _runtime_layers(memo) if x.root.is_relative_to(site)] == [None]
    for dist_info in site.glob("*.dist-info"):
        shutil.rmtree(dist_info)
    assert not any(x.root.is_relative_to(site) for x in _runtime_layers(memo))


def test_a_forged_record_never_makes_a_wheel_served(built, tmp_path, monkeypatch, keys) -> None:
    """A record naming an attacker's package (an unsigned copy of a real wheel) as a kernel wheel:
    the runtime opens it like a listed one and refuses it; a record that is not JSON is ignored."""
    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    memo = tmp_path / "user-cache"
    _runtime_layers(memo)
    [record] = _records(memo)
    evil = tmp_path / "evil" / package.name
    shutil.copytree(package, evil)
    (evil / "SIGNATURE.json").unlink()
    data = json.loads(record.read_text())
    data["wheels"] = [[n, v, dist, ver, str(evil)] for n, v, dist, ver, _ in data["wheels"]]
    record.write_text(json.dumps(data))
    [layer] = [x for x in _runtime_layers(memo) if x.root == evil / "cache"]
    assert layer.refused is not None and "unsigned" in layer.refused
    record.write_text("{not json")
    assert [x.refused for x in _runtime_layers(memo) if x.root == package / "cache"] == [None]
    assert json.loads(_records(memo)[0].read_text())["schema"] == 1  # rewritten


def test_the_records_keep_the_cache_trusted_under_a_group_writable_umask(built, tmp_path, monkeypatch,
                                                                          keys) -> None:
    """A runtime-only node whose umask is 002: the first call creates the cache directory for its
    records, and the trust policy (which refuses group-writable directories) still accepts it."""
    from typer.testing import CliRunner

    from kernelforge.cache.read.trust import TrustedRoot
    from kernelforge.cli import app

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    xdg = tmp_path / "fresh-home" / ".cache"
    memo = xdg / "kernelforge"
    old = os.umask(0o002)
    try:
        assert [x.refused for x in _runtime_layers(memo) if x.root == package / "cache"] == [None]
    finally:
        os.umask(old)
    created = [p for p in [xdg.parent, *xdg.parent.rglob("*")]]
    assert len(created) >= 5  # the home, .cache, the cache root, v1, the records and markers
    for p in created:
        assert p.stat().st_mode & 0o022 == 0, (p, oct(p.stat().st_mode))
    [record] = _records(memo)
    TrustedRoot(memo).read_bytes(("v1", record.parent.name, record.name))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    r = CliRunner().invoke(app, ["cache", "verify"], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "untrusted" not in r.output.lower(), r.output


def test_a_record_is_per_working_directory_and_a_non_str_path_entry_is_listed(built, tmp_path, monkeypatch,
                                                                              keys) -> None:
    """sys.path's "" is the working directory: a wheel found from one must not be served from
    another. A sys.path entry that is not a str (a Path) makes the runtime list, not fail."""
    import sys

    release, _ = keys
    a = _installed(built, tmp_path, monkeypatch, release, name="A")
    b = _installed(built, tmp_path, monkeypatch, release, name="B")
    monkeypatch.setattr(sys, "path", ["", *[p for p in sys.path if p not in (str(a.parent), str(b.parent))]])
    memo = tmp_path / "user-cache"
    for site in (a.parent, b.parent, a.parent):
        monkeypatch.chdir(site)
        roots = [x.root for x in _runtime_layers(memo) if x.root.name == "cache" and x.root.parent.name == a.name]
        assert roots == [site / a.name / "cache"], (site, roots)
    assert len(_records(memo)) == 2
    monkeypatch.setattr(sys, "path", [*sys.path, tmp_path / "a-path-object"])
    assert [x.root for x in _runtime_layers(memo) if x.root.parent.name == a.name] == [a / "cache"]


@pytest.mark.parametrize("fault", ["fifo", "symlink", "truncated", "foreign-owned"])
def test_a_damaged_record_is_never_waited_on_nor_followed(built, tmp_path, monkeypatch, keys, fault) -> None:
    """A FIFO, a symlink to a forged record, a truncated record or a record owned by another user in
    place of the record: the runtime neither waits, follows nor trusts it, lists sys.path instead and
    serves the signed wheel; a FIFO, symlink or truncated record is replaced by a regular record."""
    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    memo = tmp_path / "user-cache"
    _runtime_layers(memo)
    [record] = _records(memo)
    text = record.read_text()
    record.unlink()
    if fault == "fifo":
        os.mkfifo(record)
    elif fault == "symlink":
        forged = tmp_path / "forged.json"
        data = json.loads(text)
        data["wheels"] = []  # would hide the wheel if followed
        forged.write_text(json.dumps(data))
        record.symlink_to(forged)
    elif fault == "truncated":
        record.write_text(text[: len(text) // 2])
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        data = json.loads(text)
        data["wheels"] = []
        record.write_text(json.dumps(data))
        os.chown(record, 12345, 12345)
    assert [x.refused for x in _runtime_layers(memo) if x.root == package / "cache"] == [None]
    if fault != "foreign-owned":
        assert record.is_file() and not record.is_symlink() and json.loads(record.read_text())["wheels"]


def test_explain_lists_a_signed_wheels_builds_from_its_signed_files_only(built, tmp_path, monkeypatch, keys) -> None:
    """`explain` also lists the builds it will never serve (other kernel sources). Of a signed wheel
    it lists them from the group files the signature covers, not from the index, which the statement
    binds by generation and size only: an index forged at the same size (a build's source hash
    rewritten, so that it reads as stale) adds no row, while the genuine build is still chosen."""
    from typer.testing import CliRunner

    import kernelforge.config as config
    from kernelforge.cli import app

    release, _ = keys
    package = _installed(built, tmp_path, monkeypatch, release)
    monkeypatch.delenv("KERNELFORGE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the user cache: absent
    monkeypatch.setattr(config, "checkout_root", lambda: None)  # no checkout cache/ layer either
    call = ["explain", "quantize", "shape=128x8192", "format=mxfp8", "dtype=bf16", "scale_mode=floor",
            "layout=linear"]

    def explain() -> str:
        r = CliRunner().invoke(app, call, env={"COLUMNS": "250"})
        assert r.exit_code == 0, r.output
        return r.stdout

    genuine = explain()
    assert "served by quantize.mxfp8.floor.linear.bfloat16" in genuine, genuine
    assert "stale, never served" not in genuine

    index = package / "cache" / "v1" / "index.json"
    entries = json.loads(index.read_text())["entries"]
    target = next(e for e in entries.values() if e.get("kind") == "kernel" and e["op"] == "quantize")
    text = index.read_text()
    fake = "".join("0123456789abcdef"[(int(c, 16) + 1) % 16] for c in target["source_hash"])
    forged = text.replace(target["source_hash"], fake)
    assert forged != text and len(forged) == len(text)
    index.write_text(forged)
    # The forgery is one a reader of the index would show: the build now reads as stale there.
    assert json.loads(index.read_text())["entries"][target["key"]]["source_hash"] == fake

    after = explain()
    assert "stale, never served" not in after and fake[:12] not in after, after
    assert "served by quantize.mxfp8.floor.linear.bfloat16" in after, after
