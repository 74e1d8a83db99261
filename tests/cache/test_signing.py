"""Provenance: merge, import and pull accept only entries a trusted key signed; a planted library
whose records all agree never reaches the cache; a local build is never shadowed; verify and
repair re-check arrivals. Keys are generated per test; the planted library is a real shared
object whose constructor writes a marker file if anything ever loads it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelforge.cache import CacheStore, verify
from kernelforge.cache.maintenance.repair import repair
from kernelforge.cache.read.signing import (
    PublicKey,
    SigningError,
    TrustedKeys,
    generate_key,
    load_signing_key,
    trusted_keys,
)
from kernelforge.cache.transfer.bundle import export_bundle, import_bundle
from kernelforge.cache.transfer.merge import merge
from kernelforge.cache.transfer.provenance import Authority, sign_cache
from kernelforge.cache.transfer.remote import pull, push
from kernelforge.cli import cache as cache_cli
from tests._planted import planted_library
from tests.cache import _cache_helpers as h

root_app = typer.Typer()
root_app.add_typer(cache_cli.app, name="cache")
KEYS = h.KEYS


@pytest.fixture(autouse=True)
def _signed_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELFORGE_ALLOW_UNSIGNED", raising=False)
    monkeypatch.delenv("KERNELFORGE_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent-kernelforge-test")


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(root_app, ["cache", *args], env={"COLUMNS": "200", **(env or {})})


_cache = h.runtime_and_two_kernels


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    """(bytes of a real shared library whose constructor creates a marker file, the marker path)."""
    return planted_library(tmp_path_factory.mktemp("planted"))


@pytest.fixture
def keys(tmp_path: Path):
    """The release key (trusted), an attacker's key (not trusted), and the trusted-keys file."""
    release = tmp_path / "keys" / "release"
    attacker = tmp_path / "keys" / "attacker"
    release.parent.mkdir()
    generate_key(release, "release")
    generate_key(attacker, "attacker")
    trusted_file = tmp_path / "keys" / "trusted"
    trusted_file.write_text("# the release key\n" + (release.parent / "release.pub").read_text())
    return load_signing_key(release), load_signing_key(attacker), trusted_file


def _authority(trusted_file: Path, allow_unsigned: bool = False) -> Authority:
    return Authority(trusted_keys(trusted_file), allow_unsigned)


def _all_digests(root: Path, skip_quarantine: bool = True) -> set[str]:
    out = set()
    for dirpath, _dirnames, filenames in os.walk(root):
        if skip_quarantine and "quarantine" in Path(dirpath).parts:
            continue
        for n in filenames:
            out.add(hashlib.sha256((Path(dirpath) / n).read_bytes()).hexdigest())
    return out


def _forged(tmp_path: Path, planted_bytes: bytes, sign_with=None, keep_manifest_of: CacheStore | None = None):
    """An attacker's cache: same keys, quant_a's module replaced by the planted library, every record
    (meta.json, index, views) consistent because the store itself wrote them."""
    forged = _cache(tmp_path / "forged", {"a": planted_bytes})
    if keep_manifest_of is not None:  # a legitimately signed manifest, copied next to the forged entry
        src = keep_manifest_of.layout.schema_root / "signatures"
        shutil.copytree(src, forged.layout.schema_root / "signatures")
    if sign_with is not None:
        sign_cache(forged, sign_with)
    return forged


# ---- keys ----

def test_generate_key_is_private_and_never_overwrites(tmp_path: Path) -> None:
    pub = generate_key(tmp_path / "k", "ci")
    assert os.stat(tmp_path / "k").st_mode & 0o077 == 0
    line = (tmp_path / "k.pub").read_text().strip()
    assert line.startswith("kernelforge-ed25519 ") and line.endswith(" ci")
    assert trusted_keys(tmp_path / "k.pub").keys == {pub.key_id: PublicKey(pub.raw, "ci")}
    with pytest.raises(SigningError, match="exists"):
        generate_key(tmp_path / "k")


@pytest.mark.parametrize("text, message", [
    ("ssh-ed25519 AAAA\n", "expected 'kernelforge-ed25519"),
    ("kernelforge-ed25519 !!!\n", "not base64"),
    ("kernelforge-ed25519 AAAA\n", "32 bytes"),
])
def test_malformed_trusted_keys_fail_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "trusted"
    bad.write_text("# comment\n" + text)
    with pytest.raises(SigningError, match=message) as info:
        trusted_keys(bad)
    assert f"{bad}:2" in str(info.value)
    r = run("merge", str(tmp_path), "--cache", str(tmp_path / "d"), "--trusted-keys", str(bad))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and message in r.output


def test_a_fifo_as_trusted_keys_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SigningError, match="not a regular file"):
        trusted_keys(fifo)


# ---- merge, import, pull of signed and unsigned sources ----

def test_signed_merge_records_origin_and_keeps_the_manifest(tmp_path: Path, keys) -> None:
    release, _, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    manifest, count, refused = sign_cache(shard, release)
    assert count == 3 and not refused and manifest is not None
    dest = CacheStore(tmp_path / "dest")
    report = merge([shard], dest, _authority(trusted_file))
    assert report.ok and sorted(report.merged) == ["quant_a", "quant_b", "runtime-x"]
    for entry in dest.index(fresh=True).values():
        assert entry.extra["origin"] == {"via": "merge", "from": str(shard.root), "signer": release.public.key_id}
    assert (dest.layout.schema_root / "signatures" / manifest.name).read_bytes() == manifest.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELFORGE_TRUSTED_KEYS", str(trusted_file))
        checked = verify(dest)
    assert checked.ok, checked.problems
    assert checked.signed == {release.public.key_id: 3}


def test_unsigned_sources_are_refused_unless_allowed(tmp_path: Path, keys) -> None:
    _, _, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    dest = CacheStore(tmp_path / "dest")
    report = merge([shard], dest, _authority(trusted_file))
    assert not report.merged and len(report.refused) == 3
    assert all("not signed by a trusted key" in r.reason for r in report.refused)
    assert not dest.index(fresh=True)
    r = run("merge", str(shard.root), "--cache", str(dest.root), "--trusted-keys", str(trusted_file))
    assert r.exit_code == 1 and "pass --allow-unsigned" in r.output
    r = run("merge", str(shard.root), "--cache", str(dest.root), "--trusted-keys", str(trusted_file),
            "--allow-unsigned")
    assert r.exit_code == 0, r.output
    assert {e.extra["origin"]["signer"] for e in dest.index(fresh=True).values()} == {None}
    assert sorted(verify(dest).unsigned) == ["quant_a", "quant_b", "runtime-x"]


def test_the_environment_opts_in_per_source(tmp_path: Path, keys, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    monkeypatch.setenv("KERNELFORGE_ALLOW_UNSIGNED", str(tmp_path / "other*"))
    assert not merge([shard], CacheStore(tmp_path / "d1"), _authority(trusted_file)).merged
    monkeypatch.setenv("KERNELFORGE_ALLOW_UNSIGNED", str(tmp_path / "sha*"))
    assert len(merge([shard], CacheStore(tmp_path / "d2"), _authority(trusted_file)).merged) == 3


FORGERIES = ["unsigned", "attacker-signed", "legit-manifest-forged-entry"]


def _make_forgery(kind: str, tmp_path: Path, planted_bytes: bytes, keys) -> CacheStore:
    release, attacker, _ = keys
    if kind == "unsigned":
        return _forged(tmp_path, planted_bytes)
    if kind == "attacker-signed":
        return _forged(tmp_path, planted_bytes, sign_with=attacker)
    legit = _cache(tmp_path / "legit")
    sign_cache(legit, release)
    return _forged(tmp_path, planted_bytes, keep_manifest_of=legit)


def _transfer(via: str, source: CacheStore, dest: CacheStore, tmp_path: Path, authority: Authority):
    if via == "merge":
        report = merge([source], dest, authority)
        return [r.name for r in report.refused], report.merged
    if via == "import":
        bundle = tmp_path / "b.tar.gz"
        export_bundle(source, bundle)
        report = import_bundle(dest, bundle, authority=authority)
    else:
        url = (tmp_path / "remote").as_uri()
        push(source, url)
        report = pull(dest, url, authority=authority)
    return [r.name for r in report.refused], report.transferred


@pytest.mark.parametrize("via", ["merge", "import", "pull"])
@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_planted_library_with_consistent_records_is_refused(tmp_path: Path, keys, planted, via: str,
                                                              forgery: str) -> None:
    planted_bytes, marker = planted
    release, _, trusted_file = keys
    source = _make_forgery(forgery, tmp_path, planted_bytes, keys)
    assert verify(source).ok  # every record of the forged cache agrees: hashes alone cannot tell
    dest = CacheStore(tmp_path / "dest")
    refused, accepted = _transfer(via, source, dest, tmp_path, _authority(trusted_file))
    assert "quant_a" in refused and "quant_a" not in accepted
    assert hashlib.sha256(planted_bytes).hexdigest() not in _all_digests(dest.root)
    assert KEYS["a"] not in dest.index(fresh=True)
    assert not marker.exists()


@pytest.mark.parametrize("via", ["merge", "import", "pull"])
def test_a_local_build_is_never_shadowed(tmp_path: Path, keys, via: str) -> None:
    release, _, trusted_file = keys
    dest = _cache(tmp_path / "dest")  # the user's own builds
    own = {k: e.sha256 for k, e in dest.index(fresh=True).items()}
    incoming = _cache(tmp_path / "incoming", {"a": b"other bytes for the same key" * 8})
    sign_cache(incoming, release)  # even a trusted signature does not replace what the user holds
    refused, accepted = _transfer(via, incoming, dest, tmp_path, _authority(trusted_file))
    assert refused == ["quant_a"] and "quant_a" not in accepted
    assert {k: e.sha256 for k, e in dest.index(fresh=True).items()} == own
    assert "origin" not in dest.get(KEYS["a"]).extra
    reasons = list((dest.layout.quarantine).glob("*/REASON.txt"))
    assert len(reasons) == 1 and "conflict" in reasons[0].read_text()
    assert verify(dest).ok


def test_cli_conflict_exits_1_in_one_line_each(tmp_path: Path, keys) -> None:
    release, _, trusted_file = keys
    dest = _cache(tmp_path / "dest")
    incoming = _cache(tmp_path / "incoming", {"a": b"x" * 100})
    sign_cache(incoming, release)
    r = run("merge", str(incoming.root), "--cache", str(dest.root), "--trusted-keys", str(trusted_file))
    assert r.exit_code == 1
    assert sum(line.startswith("CONFLICT") for line in r.output.splitlines()) == 1
    assert "Traceback" not in r.output


def test_verify_and_repair_catch_an_edited_arrival(tmp_path: Path, keys, planted, monkeypatch) -> None:
    """Someone who can write the cache swaps an imported module and rewrites meta.json and the index
    to match: the bytes agree with every record, but not with what the signer signed."""
    planted_bytes, marker = planted
    release, _, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    sign_cache(shard, release)
    dest = CacheStore(tmp_path / "dest")
    assert merge([shard], dest, _authority(trusted_file)).ok
    entry = dest.get(KEYS["a"])
    directory = dest.entry_dir(entry)
    (directory / "module.so").write_bytes(planted_bytes)
    meta = json.loads((directory / "meta.json").read_text())
    meta["files"]["module.so"] = {"sha256": hashlib.sha256(planted_bytes).hexdigest(), "size": len(planted_bytes)}
    (directory / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    index = json.loads(dest.layout.index.read_text())
    index["entries"][KEYS["a"]] = meta
    dest.layout.index.write_text(json.dumps(index))
    repair_report = None
    monkeypatch.setenv("KERNELFORGE_TRUSTED_KEYS", str(trusted_file))
    checked = verify(dest)
    assert not checked.ok
    assert [p.problem for p in checked.problems if p.key == KEYS["a"]] == ["signature does not hold"]
    r = run("verify", "--cache", str(dest.root))
    assert r.exit_code == 1 and "signature does not hold" in r.output
    repair_report = repair(dest)
    assert [q[0] for q in repair_report.quarantined] == ["quant_a"]
    assert KEYS["a"] not in dest.index(fresh=True) and verify(dest).ok
    assert not marker.exists()


def test_a_tampered_manifest_is_reported(tmp_path: Path, keys, monkeypatch) -> None:
    release, _, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    path, _, _ = sign_cache(shard, release)
    doc = json.loads(path.read_text())
    doc["body"] = doc["body"].replace(KEYS["b"], KEYS["a"][:-1] + "0")
    path.write_text(json.dumps(doc))
    dest = CacheStore(tmp_path / "dest")
    report = merge([shard], dest, _authority(trusted_file))
    assert any("does not verify" in n for n in report.notes)
    assert not report.merged
    monkeypatch.setenv("KERNELFORGE_TRUSTED_KEYS", str(trusted_file))
    assert any(p.problem == "signature does not hold" for p in verify(shard).problems)


def test_a_revoked_key_fails_verify(tmp_path: Path, keys, monkeypatch) -> None:
    release, attacker, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    sign_cache(shard, release)
    dest = CacheStore(tmp_path / "dest")
    assert merge([shard], dest, _authority(trusted_file)).ok
    other = tmp_path / "keys" / "only-attacker"
    other.write_text((tmp_path / "keys" / "attacker.pub").read_text())
    monkeypatch.setenv("KERNELFORGE_TRUSTED_KEYS", str(other))
    problems = verify(dest).problems
    assert problems and all("no longer trusted" in p.detail for p in problems)


def test_sign_cli_and_the_signature_is_deterministic(tmp_path: Path, keys) -> None:
    release, _, _ = keys
    a, b = _cache(tmp_path / "a"), _cache(tmp_path / "b")
    key_file = tmp_path / "keys" / "release"
    for store in (a, b):
        r = run("sign", "--key", str(key_file), "--cache", str(store.root))
        assert r.exit_code == 0 and "signed 3 entries" in r.output, r.output
    names = [sorted(p.name for p in (s.layout.schema_root / "signatures").iterdir()) for s in (a, b)]
    assert names[0] == names[1] and len(names[0]) == 1
    r = run("sign", "--key", str(tmp_path / "missing"), "--cache", str(a.root))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1


def test_empty_trusted_keys_refuse_everything_signed(tmp_path: Path, keys) -> None:
    release, _, _ = keys
    shard = _cache(tmp_path / "shard")
    sign_cache(shard, release)
    report = merge([shard], CacheStore(tmp_path / "dest"), Authority(TrustedKeys({}, "none configured")))
    assert not report.merged and all("untrusted key" in r.reason for r in report.refused)


def test_merging_a_cache_into_itself_is_an_error(tmp_path: Path) -> None:
    shard = _cache(tmp_path / "shard")
    r = run("merge", str(shard.root), "--cache", str(shard.root))
    assert r.exit_code == 2 and "is the destination itself" in r.output


def test_no_cryptography_import_on_the_runtime_path() -> None:
    code = ("import sys, kernelforge.cache.read.origin, kernelforge.runtime.dispatch; "
            "print(any(m.startswith('cryptography') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_repair_quarantines_a_bad_manifest_and_revoked_arrivals(tmp_path: Path, keys, monkeypatch) -> None:
    release, attacker, trusted_file = keys
    shard = _cache(tmp_path / "shard")
    sign_cache(shard, release)
    dest = CacheStore(tmp_path / "dest")
    assert merge([shard], dest, _authority(trusted_file)).ok
    bad = dest.layout.schema_root / "signatures" / ("0" * 64 + ".json")
    bad.write_text('{"body": "{}", "signature": "AAAA"}')
    only_attacker = tmp_path / "keys" / "only-attacker"
    only_attacker.write_text((tmp_path / "keys" / "attacker.pub").read_text())
    monkeypatch.setenv("KERNELFORGE_TRUSTED_KEYS", str(only_attacker))  # the release key was revoked
    assert not verify(dest).ok
    report = repair(dest)
    assert sorted(q[0] for q in report.quarantined) == sorted(["signatures/" + bad.name, "quant_a", "quant_b",
                                                               "runtime-x"])
    assert not bad.exists() and not dest.index(fresh=True) and verify(dest).ok
