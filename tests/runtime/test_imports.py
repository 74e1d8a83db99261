"""Import hygiene, in fresh interpreters: the runtime never imports CuTe-DSL nor the tvm_ffi
Python package, and `import kernelforge` is cheap (no torch, no tvm_ffi)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


HEAVY = """
def heavy(names):
    return sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in names))
"""

RUNTIME = """
import json, sys
""" + HEAVY + """
import kernelforge
kernelforge.quantize
kernelforge.nvfp4_global_scale
import kernelforge.runtime.dispatch, kernelforge.runtime.loader, kernelforge.cache, kernelforge.families.quantize.op
import kernelforge.ops.reference
import kernelforge.cache as c
c.load_index_for_runtime, c.CacheStore, c.verify  # the lazy exports resolve
from kernelforge.runtime.dispatch import DispatchTable
DispatchTable(sys.argv[1] if len(sys.argv) > 1 else "/nonexistent-kf-cache").candidates(
    "quantize", {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}, (9, 0))
import torch
try:
    kernelforge.quantize(torch.zeros(2, 32), "mxfp8")
except ValueError:
    pass
print(json.dumps({"cutlass": heavy(["cutlass"]), "file": kernelforge.__file__,
                  "tvm_ffi": "tvm_ffi" in sys.modules}))
"""


def test_runtime_never_imports_cutlass(tmp_path):
    # Run from outside the checkout too: the installed package must be the regular one (with
    # its __init__), not a namespace package left by a stale editable install.
    for cwd in (REPO, tmp_path):
        info = _run(RUNTIME, cwd)
        assert info["cutlass"] == [], f"the runtime imported {info['cutlass']} (cwd {cwd})"
        assert info["file"] == str(REPO / "kernelforge" / "__init__.py"), info
        # the launcher in the runtime library calls kernels; the tvm_ffi package is never imported
        assert not info["tvm_ffi"], "the runtime imported the tvm_ffi Python package"


def test_cli_cache_commands_never_import_cutlass(tmp_path):
    (tmp_path / "c").mkdir()
    code = ("import json, sys\n" + HEAVY +
            "from typer.testing import CliRunner\nfrom kernelforge.cli import app\n"
            f"r = CliRunner().invoke(app, ['cache', 'verify', '--cache', {str(tmp_path / 'c')!r}])\n"
            "assert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(app, ['cache', 'ls', '--cache', " + repr(str(tmp_path / "c")) + "])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(json.dumps({'cutlass': heavy(['cutlass'])}))")
    assert _run(code, REPO)["cutlass"] == []


IMPORT_TIME = """
import json, sys, time
""" + HEAVY + """
t0 = time.perf_counter()
import kernelforge
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "heavy": heavy(["torch", "tvm_ffi", "cutlass", "numpy"]),
                  "kf": sorted(m for m in sys.modules if m.startswith("kernelforge"))}))
"""


def test_import_kernelforge_is_cheap(tmp_path):
    runs = [_run(IMPORT_TIME, cwd) for cwd in (REPO, tmp_path, REPO)]
    for info in runs:
        assert info["heavy"] == [], f"`import kernelforge` imported {info['heavy']}"
        assert info["kf"] == ["kernelforge"], info["kf"]
    # Its time is measured by benchmarks/bench_startup.py on the GPU node, not asserted here.


# Build-time and test-time modules that the runtime's import path must not load: each costs import
# time on every process's first call (a frozen dataclass ~0.7 ms to create on the build host).
NOT_ON_THE_RUNTIME_PATH = ("kernelforge.spec.model", "kernelforge.spec.select", "kernelforge.spec.loader",
                           "kernelforge.ops.reference", "kernelforge.cache.store", "kernelforge.build",
                           "kernelforge.cache.maintenance", "kernelforge.cache.transfer")

# A dispatch lookup as the first call makes it (no cache: it finds nothing, loads nothing).
DISPATCH_LOOKUP = """
from kernelforge.runtime.dispatch import DispatchTable
DispatchTable("/nonexistent-kf-cache").candidates(
    "quantize", {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}, (9, 0))
"""

# The runtime path after torch: the ops (registered) and a dispatch lookup.
OPS_AND_LOOKUP = """
import torch
import kernelforge, kernelforge.ops
kernelforge.quantize
""" + DISPATCH_LOOKUP

RUNTIME_PATH = """
import json, sys
import kernelforge
kernelforge.quantize
""" + DISPATCH_LOOKUP + """
print(json.dumps(sorted(m for m in sys.modules if m.startswith("kernelforge"))))
"""


def test_runtime_path_loads_no_build_or_reference_modules():
    loaded = _run(RUNTIME_PATH, REPO)
    off = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_ON_THE_RUNTIME_PATH)]
    assert off == [], f"import kernelforge + a dispatch lookup loaded {off}"
    assert "kernelforge.spec.kclass" in loaded  # the one spec record the dispatch needs


DATACLASSES_MADE = """
import dataclasses, json, sys
made = []
process_class = dataclasses._process_class
def recording(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return process_class(cls, *args, **kwargs)
dataclasses._process_class = recording
""" + OPS_AND_LOOKUP + """
print(json.dumps([m for m in made if m.startswith("kernelforge")]))
"""


def test_runtime_path_creates_no_dataclass():
    """Every class the runtime's import path defines is created at each process start; a frozen
    dataclass costs 0.6-1.4 ms there against 0.1-0.2 ms for a NamedTuple (build host)."""
    made = _run(DATACLASSES_MADE, REPO)
    assert made == [], f"import kernelforge.ops + a dispatch lookup created the dataclasses {made}"


STRING_ANNOTATED_TUPLES = """
import json, sys, typing
""" + OPS_AND_LOOKUP + """
found = []
for name, mod in list(sys.modules.items()):
    if not name.startswith("kernelforge"):
        continue
    for cls in vars(mod).values():
        if isinstance(cls, type) and issubclass(cls, tuple) and cls.__module__ == name and hasattr(cls, "_fields"):
            if any(isinstance(a, (str, typing.ForwardRef)) for a in cls.__dict__.get("__annotations__", {}).values()):
                found.append(f"{name}.{cls.__qualname__}")
print(json.dumps(sorted(found)))
"""

# NamedTuples whose fields stay string annotations: formats.py is a kernel source (editing it
# changes every kernel's source hash), and Candidate names LayerReader, defined after it.
STRING_ANNOTATED_ALLOWED = ["kernelforge.formats.Format", "kernelforge.runtime.layer_reader.Candidate"]


def test_runtime_path_namedtuples_have_evaluated_annotations():
    """typing.NamedTuple compiles each string annotation of a field (`from __future__ import
    annotations`) into a ForwardRef when it creates the class, ~20 us per field on the build host
    at every process start: the runtime path's NamedTuples live in modules without that import."""
    found = _run(STRING_ANNOTATED_TUPLES, REPO)
    assert found == STRING_ANNOTATED_ALLOWED, f"NamedTuples with string annotations on the runtime path: {found}"


def test_spec_package_names_resolve_lazily():
    code = """
import json, sys
import kernelforge.spec as spec
before = sorted(m for m in sys.modules if m.startswith("kernelforge.spec."))
names = {n: getattr(spec, n).__module__ if hasattr(getattr(spec, n), "__module__") else "" for n in spec.__all__}
from kernelforge.spec.model import KClass
print(json.dumps({"before": before, "same_kclass": KClass is spec.KClass, "all": sorted(spec.__all__),
                  "missing": not hasattr(spec, "no_such_name")}))
"""
    info = _run(code, REPO)
    assert info["before"] == [], "importing kernelforge.spec loaded its submodules eagerly"
    assert info["same_kclass"]
    assert {"KClass", "Variant", "Spec", "OP_SCHEMAS", "load_specs", "select", "ARCHES"} <= set(info["all"])
    assert info["missing"]
