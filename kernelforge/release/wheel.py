"""Write a wheel (PEP 427) deterministically with the stdlib: sorted entries, fixed timestamps.

The same files give the same wheel bytes: every member has the timestamp 1980-01-01 00:00:00,
Unix permissions 0644 or 0755 (so pip installs them readable, executables executable) and
DEFLATE compression; package files come in sorted order, then the .dist-info files with RECORD
last (its own line carries no hash, as the format requires).
"""
from __future__ import annotations

import base64
import hashlib
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip can hold


@dataclass(frozen=True)
class WheelFile:
    """One file of a wheel: its bytes and whether it is executable."""

    data: bytes
    executable: bool = False


def wheel_name_part(name: str) -> str:
    """A distribution name as it appears in a wheel file name (runs of -_. become _, PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def record_hash(data: bytes) -> str:
    """The RECORD form of a file's hash: sha256=<urlsafe base64, no padding>."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _member(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.create_system = 3  # Unix, so that external_attr carries the mode
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_wheel(out_dir: Path, name: str, version: str, tag: str, files: dict[str, WheelFile], *,
                metadata: list[tuple[str, str]], entry_points: dict[str, dict[str, str]],
                description: str = "") -> Path:
    """Write `<name>-<version>-<tag>.whl` into `out_dir` and return its path.

    `files` maps archive paths (posix, relative) to their content; `metadata` is the METADATA
    header fields after Metadata-Version/Name/Version (e.g. ("Requires-Dist", "x==1")), in order;
    `entry_points` maps group -> {name: value}."""
    dist = f"{wheel_name_part(name)}-{version.replace('-', '_')}"
    info_dir = f"{dist}.dist-info"
    meta_lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                  *(f"{k}: {v}" for k, v in metadata)]
    meta = "\n".join(meta_lines) + "\n"
    if description:
        meta += "Description-Content-Type: text/plain\n\n" + description.rstrip("\n") + "\n"
    wheel = (f"Wheel-Version: 1.0\nGenerator: kernelforge {version}\nRoot-Is-Purelib: false\nTag: {tag}\n")
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(items.items())) + "\n"
                  for group, items in sorted(entry_points.items()))
    dist_files = {f"{info_dir}/METADATA": meta, f"{info_dir}/WHEEL": wheel, f"{info_dir}/entry_points.txt": eps}
    ordered = sorted(files.items()) + sorted((k, WheelFile(v.encode("utf-8"))) for k, v in dist_files.items())
    for path, _ in ordered:
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"wheel member {path!r} is not a plain relative path")
    record = "".join(f"{path},{record_hash(f.data)},{len(f.data)}\n" for path, f in ordered)
    record += f"{info_dir}/RECORD,,\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{tag}.whl"
    tmp = target.with_name(target.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for path, f in ordered:
            zf.writestr(_member(path, f.executable), f.data)
        zf.writestr(_member(f"{info_dir}/RECORD", False), record.encode("utf-8"))
    tmp.replace(target)
    return target
