"""Kernel wheels say what they are and stay reproducible: a cp310-abi3-manylinux_2_34 tag checked
on the ELF files themselves, wheels written by `wheel.wheelfile` with $SOURCE_DATE_EPOCH, build
times and dates normalised so that two builds give the same bytes, and a plugin's kernels in a
wheel of their own, found and layered beside the built-in one.

The fast tests build a tiny ELF with `cc`; the `slow` ones package the small real cache of
tests/release/_kernel_cache.py (built once per process) and, for the plugin, compile the demo
plugin of tests/families/test_plugin_family.py (two variants) into a copy of it.
"""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from kernelforge.errors import CacheError
from kernelforge.registry import reload_plugins
from tests.build._kf_build_helpers import ARCH
from tests.families.test_plugin_family import DIST, OP, PLUGIN, SPEC, VERSION, write_dist
from tests.release._kernel_cache import REPO, built_or_skip, clean_env

MACHINE = platform.machine()
TAG = f"cp310-abi3-manylinux_2_34_{MACHINE}"
EPOCH = 1700000000  # 2023-11-14T22:13:20+00:00


# ---- the ELF check --------------------------------------------------------------------------

TINY_C = """
#include <sys/random.h>
int kf_tiny(void) { char b[4]; return (int)getrandom(b, sizeof b, 0); }
"""


@pytest.fixture(scope="module")
def tiny_elf(tmp_path_factory) -> bytes:
    """A real shared library calling getrandom (GLIBC_2.25 on every glibc machine)."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc)")
    d = tmp_path_factory.mktemp("elf")
    (d / "tiny.c").write_text(TINY_C)
    proc = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(d / "libtiny.so"), str(d / "tiny.c")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cc -shared failed: {proc.stderr.strip()[-300:]}")
    return (d / "libtiny.so").read_bytes()


def test_elf_needs_reads_the_glibc_versions_of_a_real_library(tiny_elf: bytes) -> None:
    from kernelforge.release.elf import check_manylinux, elf_needs, policy_problem

    needs = elf_needs(tiny_elf)
    assert needs is not None and needs.machine == MACHINE
    assert ("libc.so.6", "GLIBC_2.25") in needs.versions  # getrandom's version
    assert all(name.startswith("GLIBC_") for name in needs.names())
    assert policy_problem(needs) is None  # nothing newer than manylinux_2_34
    assert elf_needs(b"#!/bin/sh\n") is None and elf_needs(b"") is None  # not ELF: nothing to check
    machine, found = check_manylinux([("pkg/libtiny.so", tiny_elf), ("pkg/x.json", b"{}")])
    assert machine == MACHINE and list(found) == ["pkg/libtiny.so"]
    # Under an older policy the same library is refused, in one line naming the file and the version.
    with pytest.raises(CacheError) as exc:
        check_manylinux([("pkg/libtiny.so", tiny_elf)], {"GLIBC": (2, 17)}, "manylinux_2_17")
    message = str(exc.value)
    assert "\n" not in message and message.startswith("pkg/libtiny.so needs GLIBC_2.")
    assert "newer than manylinux_2_17 allows (GLIBC <= 2.17)" in message


def test_policy_refuses_newer_glibc_private_and_libstdcxx() -> None:
    from kernelforge.release.elf import ElfNeeds, check_manylinux, policy_problem

    def needs(*versions: tuple[str, str]) -> ElfNeeds:
        return ElfNeeds("x86_64", frozenset(versions))

    ok = needs(("libc.so.6", "GLIBC_2.34"), ("libc.so.6", "GLIBC_2.2.5"), ("libstdc++.so.6", "GLIBCXX_3.4.29"),
               ("libstdc++.so.6", "CXXABI_1.3.13"), ("libgcc_s.so.1", "GCC_12.0.0"))
    assert policy_problem(ok) is None
    assert policy_problem(needs(("libc.so.6", "GLIBC_2.34"), ("libc.so.6", "GLIBC_2.38"),
                                ("libc.so.6", "GLIBC_2.35"))) == \
        "GLIBC_2.38 (libc.so.6), newer than manylinux_2_34 allows (GLIBC <= 2.34)"
    assert "GLIBCXX_3.4.30 (libstdc++.so.6)" in policy_problem(needs(("libstdc++.so.6", "GLIBCXX_3.4.30")))
    assert policy_problem(needs(("libc.so.6", "GLIBC_PRIVATE"))) == \
        "GLIBC_PRIVATE (libc.so.6), which manylinux_2_34 does not provide"
    with pytest.raises(CacheError, match="holds no host ELF file"):
        check_manylinux([("a.json", b"{}")])
    with pytest.raises(CacheError, match=r"^pkg/bad.so: not a readable ELF file"):
        check_manylinux([("pkg/bad.so", b"\x7fELF\x02\x01\x01" + b"\0" * 9)])


def test_wheel_tag_comes_from_the_limited_api(tmp_path: Path) -> None:
    from packaging.tags import Tag

    from kernelforge.release.kernels import limited_api_version, wheel_tag

    assert limited_api_version() == (3, 10)  # kernelforge/build/launch.c: Py_LIMITED_API 0x030A0000
    assert wheel_tag("x86_64") == Tag("cp310", "abi3", "manylinux_2_34_x86_64")
    assert str(wheel_tag("aarch64")) == "cp310-abi3-manylinux_2_34_aarch64"
    src = tmp_path / "launch.c"
    src.write_text("#define Py_LIMITED_API 0x030C0000\n")
    assert str(wheel_tag("x86_64", src)) == "cp312-abi3-manylinux_2_34_x86_64"
    src.write_text("/* no limited API */\n")
    with pytest.raises(CacheError, match="Py_LIMITED_API"):
        wheel_tag("x86_64", src)


# ---- the wheel writer -----------------------------------------------------------------------

def _write(out: Path, **kw):  # noqa: ANN202
    from packaging.tags import Tag

    from kernelforge.release.wheel import WheelMember, write_wheel

    files = {"demo_pkg/b.txt": WheelMember(b"b\n"), "demo_pkg/a.so": WheelMember(b"\x7fELF...", True)}
    return write_wheel(out, "Demo.Pkg_Name", "1.0", Tag("cp310", "abi3", "manylinux_2_34_x86_64"), files,
                       metadata=[("Requires-Dist", "kernelforge==0.1.0")], entry_points={"g": {"n": "demo_pkg"}},
                       **kw)


def test_write_wheel_uses_wheelfile_and_source_date_epoch(tmp_path: Path, monkeypatch) -> None:
    from wheel.wheelfile import WheelFile

    from kernelforge.release.wheel import epoch_iso, zip_date_time

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = _write(tmp_path / "a")
    assert a.name == "demo_pkg_name-1.0-cp310-abi3-manylinux_2_34_x86_64.whl"
    time.sleep(1.1)  # a wall-clock timestamp anywhere would now differ
    assert _write(tmp_path / "b").read_bytes() == a.read_bytes()
    with WheelFile(a) as wf:  # checks every member against RECORD as it reads
        names = wf.namelist()
        assert names == ["demo_pkg/a.so", "demo_pkg/b.txt", "demo_pkg_name-1.0.dist-info/METADATA",
                         "demo_pkg_name-1.0.dist-info/WHEEL", "demo_pkg_name-1.0.dist-info/entry_points.txt",
                         "demo_pkg_name-1.0.dist-info/RECORD"]
        for name in names:
            wf.read(name)
        assert "Tag: cp310-abi3-manylinux_2_34_x86_64\n" in wf.read(names[3]).decode()
        assert wf.read(names[-1]).decode().endswith("demo_pkg_name-1.0.dist-info/RECORD,,\n")
        for info in wf.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0), info.filename
            assert info.external_attr >> 16 & 0o777 == (0o755 if info.filename.endswith(".so") else 0o644)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    c = _write(tmp_path / "c")
    with zipfile.ZipFile(c) as zf:
        assert {i.date_time for i in zf.infolist()} == {time.gmtime(EPOCH)[:6]}
    assert zip_date_time(0) == zip_date_time(None) == (1980, 1, 1, 0, 0, 0)  # clamped to what a zip holds
    assert epoch_iso(None) == "1970-01-01T00:00:00+00:00" and epoch_iso(EPOCH) == "2023-11-14T22:13:20+00:00"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        _write(tmp_path / "d")


def test_names_follow_the_distribution() -> None:
    from kernelforge.release.kernels import dist_name, package_name

    assert dist_name("sm_90a") == "kernelforge-kernels-sm90a" and package_name("sm_90a") == "kernelforge_kernels_sm90a"
    assert dist_name("sm_90a", "kernelforge_silu.quant") == "kernelforge-silu-quant-kernels-sm90a"
    assert package_name("sm_100f", "kernelforge-silu-quant") == "kernelforge_silu_quant_kernels_sm100f"


# ---- the plugin's version -------------------------------------------------------------------

@pytest.fixture
def demo_site(tmp_path: Path):
    """The demo op-family plugin installed (a .dist-info on sys.path) in this process."""
    site = tmp_path / "plugin-site"
    _write_plugin(site)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        reload_plugins()
        yield site
    sys.modules.pop("kf_demo_plugin", None)
    reload_plugins()


def _write_plugin(site: Path) -> None:
    write_dist(site, DIST, VERSION, "demo = kf_demo_plugin:FAMILY",
               {"kf_demo_plugin/__init__.py": PLUGIN, "kf_demo_plugin/demo_quantize.toml": SPEC})


def test_plugin_kernel_wheel_is_refused_for_another_plugin_version(demo_site: Path) -> None:
    from kernelforge.cache.read.layers import compatibility_problem, running_versions

    base = dict(running_versions())
    assert compatibility_problem({**base, "families": {DIST: VERSION}}) is None
    assert compatibility_problem({**base, "families": {}}) is None  # the built-in ops' wheel
    assert compatibility_problem({**base, "families": {DIST: "0.2.0"}}) == f"built for {DIST} 0.2.0, installed {VERSION}"
    assert compatibility_problem({**base, "families": {"kf-gone": "1.0"}}) == "built for kf-gone 1.0, which is not installed"


# ---- real wheels ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built() -> Path:
    return built_or_skip()


def _package(cache: Path, out: Path, **kw) -> list:
    from kernelforge.cache import CacheStore
    from kernelforge.release.kernels import package_arch

    return package_arch(CacheStore(cache), ARCH, out, **kw)


def _extract(wheel: Path, site: Path) -> Path:
    """Install a wheel the way pip lays it out (its members under site/); return its package dir."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
        return site / zf.namelist()[0].split("/")[0]


def _agreement_problems(package_dir: Path) -> list[str]:
    """What `cache verify` and the SHA256SUMS check find in an installed kernel wheel."""
    from kernelforge.cache import CacheStore
    from kernelforge.cache.maintenance.verification import sums_problems, verify

    report = verify(CacheStore(package_dir / "cache"))
    return [str(p) for p in report.problems] + sums_problems(package_dir)


@pytest.mark.slow
def test_packaged_wheel_passes_the_manylinux_check_and_refuses_a_newer_glibc(built: Path, tmp_path: Path,
                                                                              monkeypatch) -> None:
    from wheel.wheelfile import WheelFile

    from kernelforge.release import elf
    from kernelforge.release.elf import check_manylinux

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    (w,) = _package(built, tmp_path / "dist")
    assert w.path.name == f"kernelforge_kernels_sm90a-0.1.0-{TAG}.whl"
    with WheelFile(w.path) as wf:
        members = [(name, wf.read(name)) for name in wf.namelist()]  # RECORD checked on every read
        assert f"Tag: {TAG}\n" in wf.read("kernelforge_kernels_sm90a-0.1.0.dist-info/WHEEL").decode()
    machine, found = check_manylinux(members)
    assert machine == MACHINE
    runtime = [n for n in found if "/runtime/" in n]
    assert len(runtime) == 1 and len(found) == 3  # the runtime library and the two kernels
    glibc = {v for v in found[runtime[0]].names() if v.startswith("GLIBC_")}
    assert glibc and max(tuple(map(int, v[6:].split("."))) for v in glibc) <= (2, 34)
    # A policy older than what the runtime library needs: no wheel, one line naming file and version.
    monkeypatch.setitem(elf.POLICY, "GLIBC", (2, 3))
    with pytest.raises(CacheError) as exc:
        _package(built, tmp_path / "refused")
    assert "\n" not in str(exc.value)
    assert f"{runtime[0]} needs GLIBC_2." in str(exc.value) and "(GLIBC <= 2.3)" in str(exc.value)
    assert not list((tmp_path / "refused").glob("*.whl"))


@pytest.mark.slow
def test_two_builds_give_byte_identical_wheels(built: Path, tmp_path: Path, monkeypatch) -> None:
    """Another build of the same selection: the same files, other `created` and `build_time_s`."""
    from kernelforge.cache import CacheStore
    from kernelforge.cache.maintenance.repair import repair
    from kernelforge.cache.maintenance.verification import verify

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    (first,) = _package(built, tmp_path / "a")
    other = tmp_path / "other"
    shutil.copytree(built, other)
    metas = sorted(other.glob("v1/**/meta.json"))
    for i, meta in enumerate(metas):
        data = json.loads(meta.read_text())
        data.update(created=f"2031-02-03T04:05:{i:02d}+00:00", build_time_s=100.0 + i)
        meta.write_text(json.dumps(data, indent=1, sort_keys=True))
    report = repair(CacheStore(other))  # the index (and its views) rebuilt from the meta.json files
    assert len(report.reindexed) == len(metas) and not report.quarantined
    assert verify(CacheStore(other)).ok
    assert {e.build_time_s for e in CacheStore(other).index(fresh=True).values()} == \
        {100.0 + i for i in range(len(metas))}
    (second,) = _package(other, tmp_path / "b")
    assert hashlib.sha256(first.path.read_bytes()).hexdigest() == hashlib.sha256(second.path.read_bytes()).hexdigest()

    pkg = _extract(second.path, tmp_path / "site")
    assert _agreement_problems(pkg) == []  # meta.json vs index, views vs index, SHA256SUMS
    index = json.loads((pkg / "cache" / "v1" / "index.json").read_text())["entries"]
    assert {(e["created"], e["build_time_s"]) for e in index.values()} == {("2023-11-14T22:13:20+00:00", 0.0)}
    for e in index.values():
        assert json.loads((pkg / "cache" / "v1" / e["path"] / "meta.json").read_text()) == e
    with zipfile.ZipFile(second.path) as zf:
        assert {i.date_time for i in zf.infolist()} == {time.gmtime(EPOCH)[:6]}
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    (unset,) = _package(other, tmp_path / "c")
    with zipfile.ZipFile(unset.path) as zf:
        rows = json.loads(zf.read("kernelforge_kernels_sm90a/cache/v1/index.json"))["entries"].values()
        assert {e["created"] for e in rows} == {"1970-01-01T00:00:00+00:00"}


@pytest.mark.slow
def test_wheel_keeps_an_entrys_origin_but_not_its_builder_local_path(built: Path, tmp_path: Path) -> None:
    from kernelforge.cache import CacheStore
    from kernelforge.cache.read.index import write_index

    cache = tmp_path / "cache"
    shutil.copytree(built, cache)
    store = CacheStore(cache)
    raw = {k: e.to_json() for k, e in store.index(fresh=True).items()}
    key = next(k for k, d in sorted(raw.items()) if d["kind"] == "kernel")
    origin = {"via": "merge", "from": "shard-1", "signer": "", "unknown_field": [1, 2]}
    raw[key]["extra"]["origin"] = origin
    (store.entry_dir(store.index(fresh=True)[key]) / "meta.json").write_text(json.dumps(raw[key], indent=1,
                                                                                      sort_keys=True))
    write_index(store.layout.index, raw, check_groups=True)
    (w,) = _package(cache, tmp_path / "dist")
    pkg = _extract(w.path, tmp_path / "site")
    row = json.loads((pkg / "cache" / "v1" / "index.json").read_text())["entries"][key]
    kept = {k: v for k, v in origin.items() if k != "from"}  # a temporary shard dir differs on every build
    assert row["extra"]["origin"] == kept
    assert json.loads((pkg / "cache" / "v1" / row["path"] / "meta.json").read_text())["extra"]["origin"] == kept
    from kernelforge.cache.maintenance.verification import BAD_META, STALE_VIEWS

    agreement = [p for p in _agreement_problems(pkg) if BAD_META in p or STALE_VIEWS in p or "SHA256SUMS" in p]
    assert agreement == []


@pytest.mark.slow
def test_extra_files_hook_sees_the_sums_and_adds_files(built: Path, tmp_path: Path) -> None:
    """What a signing step hooks into: the final SHA256SUMS bytes in, files beside it out."""
    from kernelforge.cache import CacheStore
    from kernelforge.release.kernels import package_wheel, plan_wheels, wheel_files

    store = CacheStore(built)
    (plan,) = plan_wheels(store, [ARCH])
    seen: list[bytes] = []

    def sign(sums: bytes) -> dict[str, bytes]:
        seen.append(sums)
        return {"SHA256SUMS.sig": b"signed " + hashlib.sha256(sums).hexdigest().encode()}

    w = package_wheel(store, plan, tmp_path / "dist", extra_files=sign)
    pkg = _extract(w.path, tmp_path / "site")
    assert seen == [(pkg / "SHA256SUMS").read_bytes()]
    assert (pkg / "SHA256SUMS.sig").read_bytes() == b"signed " + hashlib.sha256(seen[0]).hexdigest().encode()
    assert _agreement_problems(pkg) == []
    for bad in ("SHA256SUMS", "cache/v1/extra.bin"):
        with pytest.raises(CacheError, match="extra file"):
            wheel_files(store, plan, extra_files=lambda sums, bad=bad: {bad: b"x"})


@pytest.fixture(scope="module")
def plugin_cache(built: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(cache, plugin site): the built cache plus the demo plugin's two sm_90a variants."""
    from tests.build._kf_build_helpers import toolchain_problem

    problem = toolchain_problem()
    if problem:
        pytest.skip(problem)
    tmp = tmp_path_factory.mktemp("plugin")
    site, cache = tmp / "site", tmp / "cache"
    _write_plugin(site)
    shutil.copytree(built, cache)
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "build", "--cache", str(cache), "--arch", ARCH,
                           "--only", f"{OP}.*", "-j", "2"], capture_output=True, text=True, cwd=tmp,
                          env=clean_env(PYTHONPATH=f"{site}:{REPO}"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache, site


@pytest.mark.slow
def test_plugin_kernels_ship_in_their_own_wheel(plugin_cache: tuple[Path, Path], tmp_path: Path,
                                                monkeypatch) -> None:
    from kernelforge.cache import CacheStore
    from kernelforge.cache.read.layers import wheel_layers
    from kernelforge.release.kernels import plan_wheels

    cache, site = plugin_cache
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    try:
        # A tuning table of the plugin's op, beside the committed table of the built-in ops.
        from kernelforge.build.tables import publish_table
        from kernelforge.sources import source_hash

        committed = json.loads((REPO / "kernelforge/data/tuning/nvidia_h100_80gb_hbm3.sm_90a.json").read_text())
        publish_table(CacheStore(cache), {**committed, "device": "Demo GPU", "choices": {},
                                          "sources": {OP: source_hash(OP)}, "timings_us": {}})
        plans = plan_wheels(CacheStore(cache))
        assert [(w.distribution, w.package, w.version, w.family_distribution, w.family_version) for w in plans] == [
            ("kernelforge-kernels-sm90a", "kernelforge_kernels_sm90a", "0.1.0", "", ""),
            ("kf-demo-plugin-kernels-sm90a", "kf_demo_plugin_kernels_sm90a", VERSION, DIST, VERSION)]
        written = _package(cache, tmp_path / "dist")
        assert [w.path.name for w in written] == [f"kernelforge_kernels_sm90a-0.1.0-{TAG}.whl",
                                                  f"kf_demo_plugin_kernels_sm90a-{VERSION}-{TAG}.whl"]
        assert [w.distribution for w in written] == [w.distribution for w in plans]
        builtin, plugin = (_contents(w.path) for w in written)
        assert builtin["metadata"]["Requires-Dist"] == ["kernelforge==0.1.0"]
        assert plugin["metadata"]["Requires-Dist"] == ["kernelforge==0.1.0", f"{DIST}=={VERSION}"]
        assert plugin["metadata"]["Name"] == ["kf-demo-plugin-kernels-sm90a"]
        assert builtin["entry_points"] == "[kernelforge.kernels]\nkernelforge_kernels_sm90a = kernelforge_kernels_sm90a\n"
        assert plugin["entry_points"] == \
            "[kernelforge.kernels]\nkf_demo_plugin_kernels_sm90a = kf_demo_plugin_kernels_sm90a\n"
        assert (builtin["manifest"]["distribution"], builtin["manifest"]["families"], builtin["manifest"]["ops"]) == \
            ("kernelforge-kernels-sm90a", {}, ["quantize"])
        assert (plugin["manifest"]["distribution"], plugin["manifest"]["families"], plugin["manifest"]["ops"]) == \
            ("kf-demo-plugin-kernels-sm90a", {DIST: VERSION}, [OP])
        by_kind = {name: {k: sorted({e["op"] for e in c["index"] if e["kind"] == k}) for k in ("kernel", "tuning")}
                   for name, c in (("builtin", builtin), ("plugin", plugin))}
        assert by_kind == {"builtin": {"kernel": ["quantize"], "tuning": ["tuning"]},
                           "plugin": {"kernel": [OP], "tuning": ["tuning"]}}
        # Each wheel has the tables of its own ops only: the committed ones (one per measured card,
        # each naming the built-in ops it was measured on) in the built-in wheel, the plugin op's in
        # the plugin's.
        tables = [sorted(sorted(e["variant"]["axes"]["sources"]) for e in c["index"] if e["kind"] == "tuning")
                  for c in (builtin, plugin)]
        files = sorted((REPO / "kernelforge" / "data" / "tuning").glob("*.json"))
        committed = len(files)
        assert tables == [sorted(sorted(json.loads(f.read_text())["sources"]) for f in files), [[OP]]]
        assert (builtin["manifest"]["entries"], plugin["manifest"]["entries"]) == (
            {"kernel": 2, "runtime": 1, "tuning": committed}, {"kernel": 2, "runtime": 1, "tuning": 1})
        runtimes = [{e["key"] for e in c["index"] if e["kind"] == "runtime"} for c in (builtin, plugin)]
        assert runtimes[0] == runtimes[1] and len(runtimes[0]) == 1  # each wheel carries what it links

        # Installed side by side, both are found through their entry points and served as layers.
        kernel_site = tmp_path / "kernel-site"
        for w in written:
            assert _agreement_problems(_extract(w.path, kernel_site)) == []
        monkeypatch.syspath_prepend(str(kernel_site))
        layers = [layer for layer in wheel_layers() if layer.root.is_relative_to(kernel_site)]
        assert [(layer.label, layer.refused) for layer in layers] == [
            ("wheel kernelforge-kernels-sm90a 0.1.0", None), (f"wheel kf-demo-plugin-kernels-sm90a {VERSION}", None)]
    finally:
        monkeypatch.undo()
        sys.modules.pop("kf_demo_plugin", None)
        reload_plugins()
    home = tmp_path / "home"
    (home / "xdg").mkdir(parents=True)
    ls = subprocess.run([sys.executable, "-m", "kernelforge", "cache", "ls", "--format", "json"], cwd=tmp_path,
                        capture_output=True, text=True,
                        env=clean_env(PYTHONPATH=f"{kernel_site}:{site}:{REPO}", HOME=str(home),
                                      XDG_CACHE_HOME=str(home / "xdg")))
    assert ls.returncode == 0, ls.stderr
    listed = json.loads(ls.stdout)
    wheels = {layer["label"]: layer["refused"] for layer in listed["layers"] if layer["source"] == "wheel"}
    assert wheels == {"wheel kernelforge-kernels-sm90a 0.1.0": None, f"wheel kf-demo-plugin-kernels-sm90a {VERSION}": None}
    served = {(e["op"], e["layer"]) for e in listed["entries"] if e["kind"] == "kernel" and e["layer"] in wheels}
    assert (OP, f"wheel kf-demo-plugin-kernels-sm90a {VERSION}") in served
    # The built-in wheel's kernels: served by it, unless the checkout's cache (the first layer here,
    # kernelforge being imported from the checkout) holds the same keys and shadows them.
    assert ("quantize", "wheel kernelforge-kernels-sm90a 0.1.0") in served or listed["shadowed"] >= 2

    # `kernelforge package --dist`: only the plugin's wheel, one line per wheel written.
    proc = subprocess.run([sys.executable, "-m", "kernelforge", "package", "--cache", str(cache), "--dist", DIST,
                           "--out", str(tmp_path / "only")], capture_output=True, text=True, cwd=tmp_path,
                          env=clean_env(PYTHONPATH=f"{site}:{REPO}"))
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == \
        [str(tmp_path / "only" / f"kf_demo_plugin_kernels_sm90a-{VERSION}-{TAG}.whl")]
    assert (tmp_path / "only" / written[1].path.name).read_bytes() == written[1].path.read_bytes()


def _contents(wheel: Path) -> dict:
    """A kernel wheel's METADATA fields, entry points, manifest and index rows."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        pkg = names[0].split("/")[0]
        metadata: dict[str, list[str]] = {}
        for line in zf.read(f"{info}/METADATA").decode().split("\n\n", 1)[0].splitlines():
            k, _, v = line.partition(": ")
            metadata.setdefault(k, []).append(v)
        return {"metadata": metadata, "entry_points": zf.read(f"{info}/entry_points.txt").decode().strip() + "\n",
                "manifest": json.loads(zf.read(f"{pkg}/kernelforge_kernels.json")),
                "index": list(json.loads(zf.read(f"{pkg}/cache/v1/index.json"))["entries"].values())}
