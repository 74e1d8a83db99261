"""Cache keys: every input that shapes an artifact changes its key; nothing else does. No compiling."""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.build.keys import canonical_json, runtime_key, variant_key
from kernelforge.sources import OP_SOURCES, hash_files, source_files, source_hash
from kernelforge.spec import load_specs
from tests.build._kf_build_helpers import REPO, toolchain_problem

pytestmark = pytest.mark.skipif(toolchain_problem() is not None, reason=str(toolchain_problem()))

SPEC = REPO / "specs" / "quantize.toml"


@pytest.fixture(scope="module")
def catalog():
    return load_specs([SPEC])


@pytest.fixture(scope="module")
def tc():
    from kernelforge.build.toolchain import toolchain

    return toolchain()


@pytest.fixture(scope="module")
def base(catalog):
    v = next(v for v in catalog if v.name == "quantize.mxfp8.floor.linear.bfloat16.aligned.sm_90a.t128u1")
    return v.canonical()


def _reversed(obj):
    """The same mapping with every dict's insertion order reversed (recursively)."""
    if isinstance(obj, dict):
        return {k: _reversed(obj[k]) for k in reversed(list(obj))}
    return obj


def test_key_is_a_sha256_and_stable(base, tc):
    src = source_hash("quantize")
    k1 = variant_key(base, src, tc)
    assert len(k1) == 64 and all(c in "0123456789abcdef" for c in k1)
    assert variant_key(copy.deepcopy(base), src, copy.deepcopy(tc)) == k1
    # Independent of dict ordering, in the variant and in the toolchain.
    rv, rt = _reversed(base), _reversed(tc)
    assert list(rv) != list(base) and list(rt) != list(tc)
    assert variant_key(rv, src, rt) == k1
    assert canonical_json(rv) == canonical_json(base)
    # And stable across processes (no hash randomisation, no pickle).
    code = ("import json,sys; from kernelforge.build.keys import variant_key; "
            "v,s,t=json.load(sys.stdin); print(variant_key(v,s,t))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps([base, src, tc]),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == k1


def test_every_catalog_variant_has_its_own_key(catalog, tc):
    src = source_hash("quantize")
    keys = {variant_key(v.canonical(), src, tc) for v in catalog}
    assert len(keys) == len(catalog) == len({v.name for v in catalog})


AXIS_CHANGES = [
    ("format", "mxfp4"), ("format", "nvfp4"),
    ("layout", "swizzled"),
    ("dtype", "float16"), ("dtype", "float32"),
    ("scale_mode", "rceil"), ("scale_mode", "none"),
    ("arch", "sm_100a"), ("arch", "sm_100f"),
    ("threads", 256), ("threads", 64),
    ("units_per_thread", 2),
    ("kclass", "any"),
]


@pytest.mark.parametrize("axis,value", AXIS_CHANGES, ids=[f"{a}={v}" for a, v in AXIS_CHANGES])
def test_key_changes_with_each_axis(base, tc, axis, value):
    src = source_hash("quantize")
    assert base["axes"][axis] != value
    changed = copy.deepcopy(base)
    changed["axes"][axis] = value
    assert variant_key(changed, src, tc) != variant_key(base, src, tc)


@pytest.mark.parametrize("field,value", [("k_multiple_blocks", 8), ("k_multiple_blocks", 1),
                                         ("vector_bytes", 8), ("vector_bytes", 0), ("name", "other")])
def test_key_changes_with_kclass_params(base, tc, field, value):
    src = source_hash("quantize")
    changed = copy.deepcopy(base)
    assert changed["kclass"][field] != value
    changed["kclass"][field] = value
    assert variant_key(changed, src, tc) != variant_key(base, src, tc)


def test_key_changes_with_op(base, tc):
    changed = dict(base, op="dequantize")
    assert variant_key(changed, source_hash("quantize"), tc) != variant_key(base, source_hash("quantize"), tc)


def test_source_hash_changes_with_any_byte(tmp_path, base, tc):
    files = source_files("quantize")
    assert files and all(f.is_file() for f in files)
    assert any(f.name == "formats.py" for f in files) and any(f.parent.name == "kernels" for f in files)
    copies = []
    for i, f in enumerate(files):
        d = tmp_path / str(i)  # same names, bytes copied: the hash only sees names and bytes
        d.mkdir()
        copies.append(Path(shutil.copy(f, d / f.name)))
    orig = source_hash("quantize")
    assert hash_files(copies) == orig
    key = variant_key(base, orig, tc)
    seen = {orig}
    for c in copies:
        data = bytearray(c.read_bytes())
        saved = bytes(data)
        data[len(data) // 2] ^= 0x01  # one bit of one byte
        c.write_bytes(bytes(data))
        h = hash_files(copies)
        assert h not in seen, f"editing {c.name} did not change the source hash"
        seen.add(h)
        assert variant_key(base, h, tc) != key
        c.write_bytes(saved)
    assert hash_files(copies) == orig
    # A renamed file is a different source set too.
    renamed = copies[0].with_name("renamed_" + copies[0].name)
    copies[0].rename(renamed)
    assert hash_files([renamed, *copies[1:]]) != orig


def _set(d: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(d)
    node = out
    for p in path[:-1]:
        node = node[p]
    assert node.get(path[-1]) != value
    node[path[-1]] = value
    return out


# (path into toolchain(), new value, whether the shared runtime library's key must change too)
TOOLCHAIN_CHANGES = [
    (("cutlass_dsl", "nvidia-cutlass-dsl"), "4.8.2", True),
    (("cutlass_dsl", "nvidia-cutlass-dsl-libs-base"), "4.9.0", True),
    (("cutlass_dsl", "nvidia-cutlass-dsl-libs-cu13"), "4.8.1", True),
    (("tvm_ffi_abi",), "0.2", False),
    (("compile_options",), "--enable-tvm-ffi --opt-level 2", False),
    (("link", "recipe"), 99, True),
    (("link", "cudart"), {"nvidia-cuda-runtime-cu12": "12.9.80"}, True),
    (("link", "dialect_runtime_sha256"), "0" * 64, True),
    (("link", "cxx"), "g++ (GCC) 13.1.0", True),
    (("link", "host"), "linux-aarch64", True),
]


@pytest.mark.parametrize("path,value,runtime_changes", TOOLCHAIN_CHANGES,
                         ids=[".".join(p) for p, _, _ in TOOLCHAIN_CHANGES])
def test_toolchain_components(base, tc, path, value, runtime_changes):
    src = source_hash("quantize")
    changed = _set(tc, path, value)
    assert variant_key(base, src, changed) != variant_key(base, src, tc)
    assert (runtime_key(changed) != runtime_key(tc)) is runtime_changes


def test_runtime_key_depends_on_the_link_part_only(base, tc):
    rk = runtime_key(tc)
    assert len(rk) == 64
    assert runtime_key(_reversed(tc)) == rk
    assert runtime_key(_set(tc, ("compile_options",), "--opt-level 0")) == rk
    assert runtime_key(_set(tc, ("tvm_ffi_abi",), "9.9")) == rk
    assert runtime_key(_set(tc, ("link", "cudart"), {"nvidia-cuda-runtime-cu12": "12.8.0"})) != rk
    # Neither a variant nor the kernel sources are an input of the runtime library.
    assert rk != variant_key(base, source_hash("quantize"), tc)


def test_toolchain_reads_versions_without_importing_cutlass():
    code = r"""
import json, sys, time
t0 = time.perf_counter()
from kernelforge.build.toolchain import current_toolchain_id, toolchain
tc = toolchain()
tid = current_toolchain_id()
dt = time.perf_counter() - t0
bad = sorted(m for m in sys.modules if m == "cutlass" or m.startswith("cutlass.") or m == "tvm_ffi"
             or m.startswith("tvm_ffi.") or m == "torch")
print(json.dumps({"seconds": dt, "heavy": bad, "tc": tc, "id": tid}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["heavy"] == [], f"toolchain() imported {info['heavy']}"
    assert info["seconds"] < 1.0, f"toolchain() took {info['seconds']:.2f}s"
    tc = info["tc"]
    assert tc["cutlass_dsl"].get("nvidia-cutlass-dsl"), tc
    assert tc["link"]["cudart"], tc
    assert tc["tvm_ffi_abi"].count(".") == 1
    assert "--gpu-arch" not in tc["compile_options"]  # the arch is a variant axis, keyed there
    assert len(info["id"]) == 64


def test_every_kernel_module_belongs_to_some_op():
    """A new kernels/*.py file must be registered in OP_SOURCES, or edits to it would not rebuild."""
    from kernelforge.sources import KERNELS_DIR, SHARED_SOURCES

    registered = {p for files in OP_SOURCES.values() for p in files} | set(SHARED_SOURCES)
    on_disk = {f"kernels/{f.name}" for f in KERNELS_DIR.glob("*.py")}
    assert on_disk <= registered, on_disk - registered


def test_source_hash_is_per_op():
    """Each op hashes its own kernel plus the shared helpers, not the other ops' kernels."""
    q, r = source_files("quantize"), source_files("rmsnorm_quantize")
    q_kernel, r_kernel = (f.parent / "kernel.py" for f in (q[-1], r[-1]))
    assert q_kernel.parent.name == "quantize" and r_kernel.parent.name == "rmsnorm_quantize"
    assert q_kernel in q and r_kernel not in q
    assert r_kernel in r and q_kernel not in r
    assert {f.name for f in q} & {f.name for f in r} >= {"convert.py", "blockscale.py", "formats.py"}
    assert source_hash("quantize") != source_hash("rmsnorm_quantize")
    with pytest.raises(ValueError, match="no kernel sources registered"):
        source_files("dequantize")


def test_every_kernelforge_module_a_kernel_imports_is_hashed():
    """A built-in op's kernel sources may import other kernelforge modules (another family's
    kernel helper, the shared kernels): each must be among the op's hashed files, or an edit to it
    would leave stale artifacts served."""
    import ast
    import importlib.util

    from kernelforge.registry import builtin_families

    for fam in builtin_families().values():
        hashed = {Path(f).resolve() for f in source_files(fam.name)}
        for src in fam.source_paths():
            for node in ast.walk(ast.parse(Path(src).read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernelforge"):
                    origin = Path(importlib.util.find_spec(node.module).origin).resolve()
                    assert origin in hashed, f"{fam.name}: {src} imports {node.module}, which is not hashed"
