"""A real CPU build through `kernelforge build` (quack's kernel classes compiled by kernelforge, no
GPU), the builds resolved on a pretend H100 through `kernelforge explain` (the runtime's dispatch,
what the ops call) without cutlass or quack, and the build command a missing kernel names.

$KF_QUACK_TEST_CACHE names a cache to build into (CI builds every variant there first, so this
build is then a no-op check); otherwise a temporary one gets one variant of each family.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kf_quack.family import CROSS_ENTROPY, RMSNORM, SOFTMAX

from kernelforge.testing import Explained, child_env, explain_json, run_cli

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
NAMES = {RMSNORM: "quack_rmsnorm.bfloat16.float32.bfloat16.bfloat16.4096.aligned.sm_90a",
         SOFTMAX: "quack_softmax.float16.32768.aligned.sm_90a",
         CROSS_ENTROPY: "quack_cross_entropy.bfloat16.int64.128256.aligned.sm_90a"}
DEVICE = "device=NVIDIA H100 80GB HBM3"
# One call per op as kf_quack.ops makes it, asked of the public CLI on a pretend H100 (x [M, N]).
CALLS = {RMSNORM: ["shape=333x4096", "dtype=bfloat16", "weight_dtype=float32", "out_dtype=bfloat16",
                   "residual=bfloat16", "n=4096"],
         SOFTMAX: ["shape=77x32768", "dtype=float16", "n=32768"],
         CROSS_ENTROPY: ["shape=5x128256", "dtype=bfloat16", "target_dtype=int64", "n=128256"]}
OPS_IMPORT = ("import json, sys\nimport kf_quack.ops\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('cutlass', 'quack'))))\n")


def kf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, paths=[PACKAGE_ROOT], cwd=cwd)


def explain(cache: Path, op: str, args: list[str]) -> Explained:
    """The call on a pretend H100, and the cutlass/quack modules the process imported."""
    return explain_json(op, [*args, "align=256", "arch=sm_90a", DEVICE], cache, watch=("cutlass", "quack"),
                        paths=[PACKAGE_ROOT])


@pytest.fixture(scope="module")
def built(families, tmp_path_factory):
    proc = subprocess.run([sys.executable, "-c", "import cutlass.cute, quack"], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"CuTe-DSL or quack cannot be imported, so nothing can be compiled: {proc.stderr[-200:]}")
    from importlib.metadata import entry_points

    from kernelforge.registry import ENTRY_POINT_GROUP

    if not {RMSNORM, SOFTMAX, CROSS_ENTROPY} <= {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}:
        pytest.skip("kf_quack is importable but not installed: `kernelforge build` finds op families through "
                    "their entry points (pip install -e examples/kernelforge-quack)")
    given = os.environ.get("KF_QUACK_TEST_CACHE")
    cache = Path(given) if given else tmp_path_factory.mktemp("quack") / "cache"
    only = ["quack_*"] if given else list(NAMES.values())
    proc = kf("build", "--cache", str(cache), "--arch", "sm_90a", "-j", "2", *(a for o in only for a in ("--only", o)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cache, proc.stdout


@pytest.mark.slow
def test_variants_are_keyed_by_this_package_and_quacks_sources(built, families):
    from kernelforge.build import toolchain_fingerprint, variant_key
    from kernelforge.cache import CacheStore
    from kernelforge.sources import source_hash
    from kernelforge.spec import load_specs

    cache, log = built
    entries = {e.key: e for e in CacheStore(cache).index().values()}
    for family in families:
        variants = {v.name: v for v in load_specs(list(family.spec_files))}
        src = source_hash(family.name)
        key = variant_key(variants[NAMES[family.name]].canonical(), src, toolchain_fingerprint())
        assert key in entries, f"{NAMES[family.name]}: no build keyed {key[:12]}\n{log}"
        assert entries[key].source_hash == src


@pytest.mark.slow
@pytest.mark.parametrize("op", [RMSNORM, SOFTMAX, CROSS_ENTROPY])
def test_a_call_resolves_to_its_build_without_cutlass_or_quack(built, op):
    code, doc, err, heavy = explain(built[0], op, CALLS[op])
    assert code == 0 and doc is not None, f"exit {code}\n{err}"
    assert doc["chosen"]["name"] == NAMES[op], doc
    assert heavy == [], f"resolving imported {heavy}"


@pytest.mark.slow
def test_a_misaligned_input_is_refused_not_served(built):
    code, doc, err, _ = explain(built[0], SOFTMAX, [*CALLS[SOFTMAX], "stride=65538"])
    assert code == 1 and doc is not None and doc["chosen"] is None, f"exit {code}\n{err}"
    assert "16" in json.dumps(doc["candidates"]), doc  # the aligned K-class's rule is named


@pytest.mark.slow
def test_the_ops_import_no_cutlass_or_quack(built):
    proc = subprocess.run([sys.executable, "-c", OPS_IMPORT], capture_output=True, text=True,
                          env=child_env(PACKAGE_ROOT))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.slow
def test_an_undeclared_n_names_a_spec_file_and_the_build_command(built, tmp_path):
    """N = 5120 is in no spec file: the runtime's miss says so, and the op's KernelNotBuilt adds a spec
    file and `kernelforge build --spec` command that select exactly that kernel."""
    from kf_quack.ops.common import undeclared_hint

    code, doc, _, heavy = explain(built[0], SOFTMAX, ["shape=64x5120", "dtype=bfloat16", "n=5120"])
    assert code == 1 and doc["chosen"] is None and "No spec declares quack_softmax" in doc["miss"], doc
    assert heavy == []
    assert undeclared_hint(SOFTMAX, {"dtype": "bfloat16", "n": 4096}, "sm_90a") is None  # declared
    hint = undeclared_hint(SOFTMAX, {"dtype": "bfloat16", "n": 5120}, "sm_90a")
    spec_name = "quack_softmax-bfloat16-5120.toml"
    assert hint is not None and f"kernelforge build --spec {spec_name} --arch sm_90a" in hint, hint
    (tmp_path / spec_name).write_text(hint.split(":\n\n", 1)[1].split("\nand build it", 1)[0])
    proc = kf("build", "--spec", spec_name, "--arch", "sm_90a", "--cache", str(tmp_path / "c"), "--dry-run",
              "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [v["name"] for v in json.loads(proc.stdout)["variants"]]
    assert names == ["quack_softmax.bfloat16.5120.aligned.sm_90a"], proc.stdout


@pytest.mark.slow
def test_quacks_import_leaves_the_other_families_builds_unchanged(built, tmp_path):
    """quack patches CuTe-DSL when imported (tensor indexing, TVM-FFI argument conversion). A compile
    worker that built a quack variant first still builds a built-in family's kernel to the same bytes."""
    from kernelforge.cache import CacheStore
    from kernelforge.registry import get_family

    builtin = "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1"
    quack_spec = PACKAGE_ROOT / "kf_quack" / "data" / "specs" / "quack_softmax.toml"
    builtin_spec = get_family("quantize").spec_files[0]
    shas = []
    for name, specs, only in (("plain", [builtin_spec], [builtin]),
                              ("after_quack", [quack_spec, builtin_spec], [NAMES[SOFTMAX], builtin])):
        cache = tmp_path / name
        proc = kf("build", "-j", "1", "-v", "--cache", str(cache), *(a for s in specs for a in ("--spec", str(s))),
                  *(a for o in only for a in ("--only", o)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if name == "after_quack":  # one worker, the quack variant first
            assert proc.stdout.index(NAMES[SOFTMAX]) < proc.stdout.index(builtin), proc.stdout
        shas += [e.sha256 for e in CacheStore(cache).index().values() if e.name == builtin]
    assert len(shas) == 2 and shas[0] == shas[1], shas
