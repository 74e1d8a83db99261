"""Installed kernel wheels are served only when a trusted key signed them (SIGNATURE.json), or the
user allowed that distribution unsigned; a signed wheel whose files were swapped is refused.
Real wheels of a small real build, unpacked the way pip lays them out."""
from __future__ import annotations

import hashlib
import json
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
