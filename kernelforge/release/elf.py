"""What the ELF files of a kernel wheel need from the system, checked against its manylinux tag.

A wheel tagged `manylinux_2_34_<machine>` promises to load on any Linux with glibc >= 2.34. The
promise is checked on the files themselves, never on the build host: every ELF file going into
the wheel is read with pyelftools, the symbol versions it needs (`.gnu.version_r`: GLIBC_2.34 from
libc.so.6, GLIBCXX_3.4.29 from libstdc++.so.6, ...) are collected, and a version newer than the
policy allows refuses the wheel. The wheel's machine (x86_64, aarch64) is taken from the ELF
headers too. GPU code objects (cubins: ELF files for EM_CUDA) need nothing from the host's C
library and are skipped.

The policy is manylinux_2_34's (PEP 600; auditwheel's policy of the same name, the toolchain of
the manylinux_2_34 images: glibc 2.34, GCC 11's libstdc++): GLIBC <= 2.34, GLIBCXX <= 3.4.29,
CXXABI <= 1.3.13. Other version families (GCC_ from libgcc_s, ...) are collected and reported.
"""
from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernelforge.errors import CacheError

MANYLINUX_GLIBC = (2, 34)
MANYLINUX = f"manylinux_{MANYLINUX_GLIBC[0]}_{MANYLINUX_GLIBC[1]}"
# The newest symbol version of each family that the policy allows (families not named: not limited).
POLICY: dict[str, tuple[int, ...]] = {"GLIBC": MANYLINUX_GLIBC, "GLIBCXX": (3, 4, 29), "CXXABI": (1, 3, 13)}
# Version families whose non-numeric versions (GLIBC_PRIVATE, GLIBC_ABI_DT_RELR) the policy refuses.
_STRICT = ("GLIBC",)
_MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
_SKIPPED_MACHINES = {"EM_CUDA"}  # GPU code objects
_VERSION = re.compile(r"([A-Z][A-Z0-9]*?)_(\d+(?:\.\d+)*)$")
ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ElfNeeds:
    """One host ELF file: its machine (as a wheel platform names it) and the symbol versions it
    needs, as (library, version name) pairs, e.g. ("libc.so.6", "GLIBC_2.34")."""

    machine: str
    versions: frozenset[tuple[str, str]]

    def names(self) -> set[str]:
        """The version names alone: {"GLIBC_2.34", "GLIBC_2.2.5", ...}."""
        return {v for _, v in self.versions}


def _elffile(data: bytes):  # noqa: ANN202 - pyelftools' type, imported lazily
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError as exc:  # pragma: no cover - pyelftools is part of the build extra
        raise CacheError("checking the wheel's ELF files needs pyelftools "
                         "(pip install 'kernelforge[build]' or pip install pyelftools)") from exc
    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as exc:
        raise ValueError(f"not a readable ELF file ({exc})") from None


def elf_needs(data: bytes) -> ElfNeeds | None:
    """The machine and needed symbol versions of an ELF file's bytes; None for bytes that are not
    ELF, or for a GPU code object. ValueError: an ELF file pyelftools cannot read, or one for a
    machine no manylinux wheel here is built for."""
    if not data.startswith(ELF_MAGIC):
        return None
    elf = _elffile(data)  # first: it says so if pyelftools is missing
    from elftools.common.exceptions import ELFError
    from elftools.elf.gnuversions import GNUVerNeedSection

    machine = elf["e_machine"]
    if machine in _SKIPPED_MACHINES:
        return None
    if machine not in _MACHINES or elf.elfclass != 64 or not elf.little_endian:
        raise ValueError(f"an ELF file for {machine} ({elf.elfclass}-bit), not one of "
                         f"{', '.join(sorted(_MACHINES.values()))}")
    versions: set[tuple[str, str]] = set()
    try:
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for verneed, auxiliaries in section.iter_versions():
                    versions.update((str(verneed.name), str(aux.name)) for aux in auxiliaries)
    except ELFError as exc:
        raise ValueError(f"unreadable symbol versions ({exc})") from None
    return ElfNeeds(_MACHINES[machine], frozenset(versions))


def _parse(name: str) -> tuple[str, tuple[int, ...]] | None:
    m = _VERSION.fullmatch(name)
    return (m.group(1), tuple(int(x) for x in m.group(2).split("."))) if m else None


def policy_problem(needs: ElfNeeds, policy: Mapping[str, tuple[int, ...]] = POLICY,
                   tag: str = MANYLINUX) -> str | None:
    """The first (newest) needed version the policy does not allow, as "GLIBC_2.38 (libc.so.6),
    newer than manylinux_2_34 allows (GLIBC <= 2.34)"; None if every one is allowed."""
    worst: tuple[tuple[int, ...], str] | None = None
    for library, name in sorted(needs.versions):
        parsed = _parse(name)
        if parsed is None:
            if name.split("_", 1)[0] in _STRICT:
                return f"{name} ({library}), which {tag} does not provide"
            continue
        family, version = parsed
        limit = policy.get(family)
        if limit is not None and version > limit and (worst is None or version > worst[0]):
            worst = (version, f"{name} ({library}), newer than {tag} allows "
                              f"({family} <= {'.'.join(map(str, limit))})")
    return worst[1] if worst else None


def check_manylinux(files: Iterable[tuple[str, bytes]], policy: Mapping[str, tuple[int, ...]] = POLICY,
                    tag: str = MANYLINUX) -> tuple[str, dict[str, ElfNeeds]]:
    """Check every ELF file of `files` ((name, bytes) pairs) against `policy`; return the machine
    they share and {name: what it needs} of each host ELF file.

    CacheError (one line naming the file and the version) if a file needs a version newer than
    the policy allows, is unreadable, or is built for another machine than the others; also if
    there is no host ELF file at all (then nothing says which machine the wheel is for)."""
    found: dict[str, ElfNeeds] = {}
    for name, data in files:
        try:
            needs = elf_needs(data)
        except ValueError as exc:
            raise CacheError(f"{name}: {exc}") from None
        if needs is None:
            continue
        problem = policy_problem(needs, policy, tag)
        if problem:
            raise CacheError(f"{name} needs {problem}; rebuild it on a host with glibc "
                             f"{'.'.join(map(str, MANYLINUX_GLIBC))} (e.g. the {tag} image)")
        found[name] = needs
    machines = {n.machine for n in found.values()}
    if not machines:
        raise CacheError("the wheel holds no host ELF file, so nothing says which machine it is for")
    if len(machines) > 1:
        by = {m: next(k for k, n in sorted(found.items()) if n.machine == m) for m in sorted(machines)}
        raise CacheError("the wheel's ELF files are built for several machines: "
                         + ", ".join(f"{m} ({k})" for m, k in by.items()))
    return machines.pop(), found
