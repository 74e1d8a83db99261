"""The README's release pipeline end to end, as a release engineer and then a GPU node run it.

`ci/release/release.sh` on a small selection of the built-in ops and of the example op family
(examples/kernelforge-silu-quant, installed in the overlay venv `make install-example` makes):
2 shards, each signed, merged with the release key trusted, verified, packaged into two signed
kernel wheels plus the kernelforge wheel. Then a fresh venv (no checkout, no cache directory)
installs those wheels and the example's own wheel with pip, resolving the runtime dependencies
from kernelforge's metadata, trusts only the release key, and runs `cache verify`, `cache ls`
and `explain` there. Against the same installed release: a tampered shard, a forged bundle and
a forged remote entry (a real planted shared library, every record rewritten to agree) are
refused with one line each, and the planted bytes never reach the destination cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.release._kernel_cache import REPO, clean_env, skip_reason

pytestmark = pytest.mark.slow
EXAMPLE_VENV = REPO / "build" / "example-venv"
ONLY = "quantize.mxfp8.floor.linear.bfloat16.* silu_mul_quantize.mxfp8.floor.linear.bfloat16.*"
# The repository's release specs and the example plugin's own (a plugin whose kernels the release ships).
SPECS = f"specs {REPO}/examples/kernelforge-silu-quant/kf_silu_quant/data/specs"
BUILTIN_DIST, PLUGIN_DIST = "kernelforge_kernels_sm90a", "kernelforge_silu_quant_kernels_sm90a"


@dataclass
class Node:
    """A runtime-only environment with the release installed."""

    python: Path
    home: Path
    env: dict[str, str]
    dist: Path
    key: Path
    release_out: str
    release_env: dict[str, str]

    def kf(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), "-m", "kernelforge", *args], capture_output=True, text=True,
                              env=self.env, cwd=cwd or self.home, timeout=300)

    def package_dir(self, name: str) -> Path:
        out = subprocess.run([str(self.python), "-c", f"import {name}, os; print(os.path.dirname({name}.__file__))"],
                             capture_output=True, text=True, env=self.env, cwd=self.home, check=True)
        return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    problem = skip_reason()
    if problem:
        pytest.skip(problem)
    if not (EXAMPLE_VENV / "bin" / "python").exists():
        pytest.skip(f"{EXAMPLE_VENV} is missing: `make install-example` makes it (make test does)")
    base = tmp_path_factory.mktemp("pipeline")
    key = base / "release.key"
    subprocess.run([str(EXAMPLE_VENV / "bin" / "python"), "-m", "kernelforge", "key", "generate", str(key)],
                   check=True, capture_output=True, env=clean_env())
    dist = base / "dist"
    env = clean_env(SIGNING_KEY=str(key), SHARDS="2", ARCHES="sm_90a", ONLY=ONLY, SPECS=SPECS,
                    KF=f"{EXAMPLE_VENV}/bin/python -m kernelforge", PATH=f"{EXAMPLE_VENV}/bin:{os.environ['PATH']}")
    env.pop("KERNELFORGE_ALLOW_UNSIGNED", None)  # the release itself must hold without the suite's opt-in
    release = subprocess.run(["bash", str(REPO / "ci" / "release" / "release.sh"), str(dist)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=1200)
    assert release.returncode == 0, release.stdout + release.stderr
    subprocess.run([str(EXAMPLE_VENV / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(dist), str(REPO / "examples" / "kernelforge-silu-quant")],
                   check=True, capture_output=True, env=clean_env())
    env_dir = base / "node-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "torch==2.13.0"], check=True, capture_output=True, env=clean_env())
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    installed = subprocess.run([*pip, *wheels], capture_output=True, text=True, env=clean_env())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    home = base / "home"
    home.mkdir()
    node_env = clean_env(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"),
                         KERNELFORGE_TRUSTED_KEYS=f"{key}.pub")
    node_env.pop("KERNELFORGE_ALLOW_UNSIGNED", None)
    return Node(python, home, node_env, dist, key, release.stdout + release.stderr, env)


def test_release_shards_signs_and_writes_three_wheels(node: Node) -> None:
    out = node.release_out
    assert out.count("signed ") >= 2 and "merged " in out and "conflicts 0, refused 0" in out, out
    names = sorted(p.name for p in node.dist.glob("*.whl"))
    assert [n.split("-")[0] for n in names] == ["kernelforge", "kernelforge_kernels_sm90a",
                                                "kernelforge_silu_quant", "kernelforge_silu_quant_kernels_sm90a"]
    assert all(n.endswith("cp310-abi3-manylinux_2_34_x86_64.whl") for n in names if "_kernels_" in n)
    sums = (node.dist / "SHA256SUMS").read_text()
    assert all(n in sums for n in names if n.startswith("kernelforge_kernels") or n.startswith("kernelforge-"))


def test_a_second_clean_release_gives_byte_identical_kernel_wheels(node: Node, tmp_path: Path) -> None:
    """Another run of the script builds every shard again from nothing into other temporary roots."""
    again = subprocess.run(["bash", str(REPO / "ci" / "release" / "release.sh"), str(tmp_path / "dist")], cwd=REPO,
                           env=node.release_env, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stdout + again.stderr
    first = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in node.dist.glob("*_kernels_*.whl")}
    second = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "dist").glob("*_kernels_*.whl")}
    assert len(first) == 2 and first == second
    print("kernel wheel sha256:", json.dumps(first, indent=1))


def test_installed_node_verifies_lists_and_explains(node: Node) -> None:
    verify = node.kf("cache", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    key_id = hashlib.sha256(__import__("base64").b64decode(
        (Path(f"{node.key}.pub").read_text().split()[1]))).hexdigest()[:16]
    assert verify.stdout.count(f"(read-only; signed by key {key_id})") == 2, verify.stdout
    assert "UNSIGNED" not in verify.stdout
    ls = node.kf("cache", "ls")
    assert ls.returncode == 0 and "silu_mul_quantize.mxfp8.floor.linear.bfloat16" in ls.stdout
    assert "quantize.mxfp8.floor.linear.bfloat16" in ls.stdout and f"signed by {key_id}" in ls.stdout, ls.stdout
    for op, wheel in (("quantize", "kernelforge-kernels-sm90a"), ("silu_mul_quantize", "kernelforge-silu-quant-kernels-sm90a")):
        explain = node.kf("explain", op, "shape=4096x7168", "format=mxfp8", "dtype=bf16", "arch=sm_90a")
        assert explain.returncode == 0, explain.stdout + explain.stderr
        chosen = [line for line in explain.stdout.splitlines() if "CHOSEN" in line]
        assert len(chosen) == 1 and f"wheel {wheel}" in chosen[0] and f"signed by {key_id}" in chosen[0], explain.stdout
    assert not (node.home / ".cache" / "kernelforge").exists()  # nothing written on the node


def test_an_unsigned_install_is_refused_in_one_line(node: Node) -> None:
    env = {**node.env, "KERNELFORGE_TRUSTED_KEYS": str(node.home / "empty-trusted-keys")}
    (node.home / "empty-trusted-keys").write_text("# no key\n")
    r = subprocess.run([str(node.python), "-m", "kernelforge", "cache", "verify"], capture_output=True, text=True,
                       env=env, cwd=node.home, timeout=120)
    assert r.returncode == 1 and "not trusted" in r.stdout and "Traceback" not in r.stdout + r.stderr


PLANT = r'''
import hashlib, json, shutil, subprocess, sys
from pathlib import Path
from kernelforge.cache import CacheStore
from kernelforge.cache.read.index import write_index
src, dst, marker, workdir = map(Path, sys.argv[1:5])
shutil.copytree(src, dst)
c = workdir / "evil.c"
c.write_text('#include <stdio.h>\n__attribute__((constructor)) static void m(void) {'
             f' FILE* f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
subprocess.run(["cc", "-shared", "-fPIC", "-o", str(workdir / "evil.so"), str(c)], check=True)
planted = (workdir / "evil.so").read_bytes()
store = CacheStore(dst)
entry = next(e for e in store.index(fresh=True).values() if e.kind == "kernel")
d = store.entry_dir(entry)
(d / entry.main_file).write_bytes(planted)
data = {**entry.to_json(), "files": {**entry.files, entry.main_file: {
    "sha256": hashlib.sha256(planted).hexdigest(), "size": len(planted)}}}
(d / "meta.json").write_text(json.dumps(data, indent=1, sort_keys=True))
raw = json.loads(store.layout.index.read_text())["entries"]
raw[entry.key] = data
write_index(store.layout.index, raw)
print(entry.name, hashlib.sha256(planted).hexdigest())
'''


def _digests(root: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")
            if p.is_file() and "quarantine" not in p.parts}


@pytest.mark.parametrize("via", ["shard", "bundle", "remote"])
def test_forged_sources_are_refused_on_the_node(node: Node, tmp_path: Path, via: str) -> None:
    """A shard, bundle or remote whose module is a planted library and whose meta.json, index and
    views all agree with it (the release's own signed manifest travels with it)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the planted library")
    genuine = node.package_dir(BUILTIN_DIST) / "cache"
    forged, marker = tmp_path / "forged", tmp_path / "LOADED"
    planted = subprocess.run([str(node.python), "-c", PLANT, str(genuine), str(forged), str(marker), str(tmp_path)],
                             capture_output=True, text=True, env=node.env, cwd=node.home, check=True)
    name, planted_sha = planted.stdout.split()
    assert node.kf("cache", "verify", "--cache", str(forged)).returncode == 1  # its signature no longer holds
    dest = tmp_path / "dest"
    if via == "shard":
        r = node.kf("cache", "merge", str(forged), "--cache", str(dest))
    elif via == "bundle":
        bundle = tmp_path / "forged.tar.gz"
        assert node.kf("cache", "export", str(bundle), "--cache", str(forged)).returncode == 0
        r = node.kf("cache", "import", str(bundle), "--cache", str(dest))
    else:
        url = (tmp_path / "remote").as_uri()
        assert node.kf("cache", "push", url, "--cache", str(forged)).returncode == 0
        r = node.kf("cache", "pull", url, "--cache", str(dest))
    refused = [line for line in r.stdout.splitlines() if line.startswith(("REFUSED", "CONFLICT"))]
    assert r.returncode == 1 and len(refused) == 1 and name in refused[0], r.stdout + r.stderr
    assert "differ from what key" in refused[0] and "Traceback" not in r.stdout + r.stderr
    assert planted_sha not in _digests(dest) and not marker.exists()
    assert node.kf("cache", "verify", "--cache", str(dest)).returncode == 0  # the genuine rest arrived intact
