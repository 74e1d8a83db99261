"""The loader holds no descriptor per loaded module, and a reused descriptor number never loads
an earlier module: real shared libraries (built with the C compiler) loaded through
`/proc/self/fd` in fresh processes, and the trusted root's kept directory descriptors."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelforge.cache.read.trust import TrustedRoot

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or not Path("/proc/self/fd").is_dir(),
                                reason="needs a C compiler and /proc (Linux)")

LOAD_THROUGH_ONE_NUMBER = r"""
import ctypes, os, sys
from kernelforge.runtime.loader import fresh_fd_name
libs, naive = sys.argv[1:-1], sys.argv[-1] == "naive"
seen, numbers = [], set()
for lib in libs:
    fd = os.open(lib, os.O_RDONLY | os.O_CLOEXEC)
    numbers.add(fd)
    name = f"/proc/self/fd/{fd}" if naive else fresh_fd_name(fd)
    seen.append(ctypes.CDLL(name, mode=os.RTLD_LOCAL).which_lib())
    os.close(fd)
print(len(numbers), "".join(chr(c) for c in seen))
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> list[str]:
    """Four distinct shared libraries; which_lib() returns each one's own letter."""
    out = tmp_path_factory.mktemp("libs")
    paths = []
    for letter in "abcd":
        src = out / f"{letter}.c"
        src.write_text(f"int which_lib(void) {{ return '{letter}'; }}\n")
        lib = out / f"lib{letter}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
        paths.append(str(lib))
    return paths


def _run(libs: list[str], mode: str) -> str:
    proc = subprocess.run([sys.executable, "-c", LOAD_THROUGH_ONE_NUMBER, *libs, mode], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_each_load_through_a_reused_descriptor_number_gets_its_own_library(libs):
    numbers, letters = _run(libs, "fresh")
    assert numbers == "1"  # closed after each load, so every library came through the same number
    assert letters == "abcd"


def test_the_plain_name_of_a_reused_number_would_load_the_first_library(libs):
    # What fresh_fd_name prevents: the dynamic linker matches the name and returns the earlier object.
    numbers, letters = _run(libs, "naive")
    assert numbers == "1" and letters == "aaaa"


def test_fresh_fd_names_are_never_repeated():
    from kernelforge.runtime.loader import fresh_fd_name

    names = [fresh_fd_name(n) for n in (900, 901, 900, 900, 901)]
    assert len(set(names)) == len(names)
    assert all(os.path.normpath(n) in ("/proc/self/fd/900", "/proc/self/fd/901") for n in names)
    assert "/proc/self/fd/900" not in names  # never the plain spelling another library may have used


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_trusted_root_keeps_a_bounded_number_of_directory_descriptors(tmp_path):
    root = tmp_path / "cache"
    entries = [("v1", "artifacts", f"{i:02x}", f"{i:02x}" + "0" * 62) for i in range(40)]
    for parts in entries:
        root.joinpath(*parts).mkdir(parents=True)
    trusted = TrustedRoot(root)
    os.close(trusted.open_dir(entries[0]))
    after_first = _open_fds()
    for parts in entries[1:]:
        os.close(trusted.open_dir(parts))
    assert _open_fds() == after_first  # no descriptor kept per two-hex prefix or entry
    assert set(trusted._dirs) == {(), ("v1",), ("v1", "artifacts")}


def test_holds_regular_file_applies_the_policy_without_a_descriptor(tmp_path, monkeypatch) -> None:
    root = tmp_path / "cache"
    (root / "v1" / "d").mkdir(parents=True)
    (root / "v1" / "d" / "f").write_bytes(b"")
    (root / "v1" / "link").symlink_to(root / "v1" / "d")
    trusted = TrustedRoot(root)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert trusted.holds_regular_file(("v1", "d", "f"))
    assert not trusted.holds_regular_file(("v1", "d"))  # a directory, not a regular file
    assert not trusted.holds_regular_file(("v1", "link", "f"))  # a symlinked component
    assert not trusted.holds_regular_file(("v1", "d", "missing"))
    assert not trusted.holds_regular_file(("v1", "..", "v1", "d", "f"))  # not a plain component
    assert opened == []
    (root / "v1" / "d").chmod(0o777)  # group/other-writable on the way
    assert not TrustedRoot(root).holds_regular_file(("v1", "d", "f"))
    monkeypatch.setenv("KERNELFORGE_TRUST_SHARED_CACHE", "1")
    assert TrustedRoot(root).holds_regular_file(("v1", "d", "f"))
