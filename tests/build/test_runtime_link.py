"""The runtime library's undefined-symbol check (link.check_undefined), on real shared objects."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelforge.build.link import check_undefined
from kernelforge.errors import BuildError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                                reason="needs gcc and nm (the build host's toolchain)")


def _shared(tmp_path: Path, name: str, body: str) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(body)
    lib = tmp_path / f"lib{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_python_and_tvm_ffi_symbols_may_stay_undefined(tmp_path):
    lib = _shared(tmp_path, "ok", "extern long PyLong_AsLong(void*); extern int TVMFFIEnvSetStream(int, int, void*, void**);\n"
                                  "long f(void* o) { TVMFFIEnvSetStream(2, 0, 0, 0); return PyLong_AsLong(o); }\n")
    check_undefined(lib)


def test_any_other_undefined_symbol_fails_the_build(tmp_path):
    lib = _shared(tmp_path, "bad", "extern int cudaMissingFromTheLink(int);\nint f(int x) { return cudaMissingFromTheLink(x); }\n")
    with pytest.raises(BuildError, match="leaves symbols undefined: cudaMissingFromTheLink"):
        check_undefined(lib)
