"""The installed distributions as the layers need them: names and versions read from the
`*.dist-info` directory names on sys.path, and the kernel wheels' entry points among them.

`importlib.metadata`'s scan opens every installed distribution's files (a cost that grows with
the environment, milliseconds on a training image, paid by every process's first call); this
lists each sys.path directory once. A wheel-installed distribution's directory is named
`{name}-{version}.dist-info` with both parts escaped (https://packaging.python.org/en/latest/specifications/binary-distribution-format/#escaping-and-unicode),
and `kernelforge package` names every kernel wheel `<owner>-kernels-<arch>`
(`kernelforge.release.kernels.distribution_name`), so only those distributions' entry points are
read. As in `importlib.metadata`, the first distribution of a name on sys.path wins. A name this
listing cannot place (an egg-info, a zipped path entry) is looked up with `importlib.metadata`.
"""

import importlib.metadata as md
import os
import re
import sys
from pathlib import Path
from typing import Iterable, NamedTuple

KERNEL_WHEEL = re.compile(r"-kernels-sm\d+[a-z]*$")  # canonical distribution names of kernel wheels


class Installed(NamedTuple):
    """One distribution found on sys.path (its canonical name, version and dist-info directory)."""

    name: str
    version: str
    entry: str  # the sys.path entry
    dirname: str  # the dist-info directory's name in it

    @property
    def dist_info(self) -> Path:
        return Path(self.entry or ".", self.dirname)


class KernelEntryPoint(NamedTuple):
    """An entry point of the group `kernelforge.kernels` (what `_wheel_layer` takes)."""

    name: str
    value: str  # the kernel wheel's import package
    distribution: str  # its Name as written in METADATA
    version: str


def canonical(name: str) -> str:
    """PEP 503 normalization, the form distributions are compared in: the rule of
    `packaging.utils.canonicalize_name` (what `kernelforge package` names wheels with), written
    out because packaging is not a runtime dependency and importing it would cost the first call
    milliseconds (tests/cache/test_installed.py holds the two to the same result)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_infos(entry: str) -> list[str] | None:
    """The `*.dist-info` directory names in the sys.path entry `entry`, sorted (None: not a
    listable directory: missing, a zip, unreadable). One listing; nothing is opened."""
    try:
        with os.scandir(entry or ".") as it:
            return sorted(e.name for e in it if e.name.endswith(".dist-info"))
    except OSError:
        return None


def listing_of(per_entry: Iterable[tuple[str, list[str]]]) -> dict[str, Installed]:
    """The distributions of (sys.path entry, its dist-info names) pairs, in path order, by
    canonical name, the first on the path winning."""
    found: dict[str, Installed] = {}
    for entry, names in per_entry:
        for dirname in names:
            stem = dirname[:-len(".dist-info")]
            name, sep, version = stem.partition("-")
            if not sep or not version:
                continue
            key = name.lower().replace("_", "-").replace(".", "-")  # `canonical` of an escaped name
            if key not in found:
                found[key] = Installed(key, version, entry, dirname)
    return found


def installed() -> dict[str, Installed]:
    """Every distribution with a `*.dist-info` directory on sys.path, by canonical name, the first
    on the path winning. One directory listing per path entry; nothing is opened."""
    return listing_of((entry, dist_infos(entry) or []) for entry in sys.path)


def headers(dist_info: Path) -> dict[str, str]:
    """The first value of each header of a dist-info's METADATA (what `md.version` and
    `dist.metadata["Name"]` read), up to the blank line before the description."""
    out: dict[str, str] = {}
    with open(dist_info / "METADATA", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            if sep and not key[:1].isspace():
                out.setdefault(key, value.strip())
    return out


def version(distribution: str, listing: dict[str, Installed] | None = None) -> str | None:
    """The installed version of `distribution` (None: not installed), as `importlib.metadata`
    reads it: METADATA's Version."""
    hit = (installed() if listing is None else listing).get(canonical(distribution))
    if hit is not None:
        try:
            return headers(hit.dist_info).get("Version") or hit.version
        except OSError:
            pass
    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


def kernel_entry_points(group: str, listing: dict[str, Installed] | None = None) -> list[KernelEntryPoint]:
    """The entry points of `group` declared by installed kernel wheels, in no particular order."""
    out = []
    for dist in (installed() if listing is None else listing).values():
        if not KERNEL_WHEEL.search(dist.name):
            continue
        try:
            text = (dist.dist_info / "entry_points.txt").read_text(encoding="utf-8")
            if group not in text:
                continue
            meta = headers(dist.dist_info)
        except OSError:
            continue
        name, ver = meta.get("Name") or dist.name, meta.get("Version") or dist.version
        out.extend(KernelEntryPoint(ep_name, value, name, ver) for ep_name, value in _section(text, group))
    return out


def _section(text: str, group: str) -> list[tuple[str, str]]:
    """The `name = value` lines of section `[group]` of an entry_points.txt (an INI file:
    https://packaging.python.org/en/latest/specifications/entry-points/#file-format)."""
    out, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
        elif inside and "=" in line:
            name, value = line.split("=", 1)
            out.append((name.strip(), value.strip()))
    return out
