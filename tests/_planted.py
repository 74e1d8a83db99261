"""A real shared library whose constructor leaves a marker file: what an attacker plants where a
kernel module should be. A test that loads it would see the marker; the tests assert it never appears."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def planted_library(directory: Path) -> tuple[bytes, Path]:
    """(bytes of the library, the marker path it creates when loaded); skips without a C compiler."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the planted library")
    marker = directory / "LOADED"
    src = directory / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void mark(void) {\n'
                   f'  FILE* f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}\n}}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(directory / "evil.so"), str(src)], check=True)
    return (directory / "evil.so").read_bytes(), marker
