"""Write a wheel (PEP 427) deterministically with the well-kept libraries.

`wheel.wheelfile.WheelFile` writes the zip and its RECORD (hashes and sizes of every member, its
own line last); `packaging` normalises the name and version and builds the tag. The same files
give the same wheel bytes: every member gets the same timestamp (SOURCE_DATE_EPOCH, clamped to
1980-01-01, the earliest a zip holds; 1980-01-01 when unset), Unix permissions 0644 or 0755 (so
pip installs them readable, executables executable) and DEFLATE compression; package files come
in sorted order, then the .dist-info files, RECORD last.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from packaging.tags import Tag, parse_tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelFile

ZIP_EPOCH = 315532800  # 1980-01-01 00:00:00 UTC: the earliest time a zip can hold
SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"


@dataclass(frozen=True)
class WheelMember:
    """One file of a wheel: its bytes and whether it is executable."""

    data: bytes
    executable: bool = False


def source_date_epoch(environ: Mapping[str, str] | None = None) -> int | None:
    """$SOURCE_DATE_EPOCH as an int (None when unset or empty); ValueError if it is not an integer."""
    value = (os.environ if environ is None else environ).get(SOURCE_DATE_EPOCH, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"${SOURCE_DATE_EPOCH}={value!r} is not an integer (seconds since 1970)") from None


def zip_date_time(epoch: int | None) -> tuple[int, int, int, int, int, int]:
    """The zip member timestamp for `epoch` (UTC): clamped to 1980-01-01, which is also the default."""
    return tuple(time.gmtime(max(epoch if epoch is not None else ZIP_EPOCH, ZIP_EPOCH))[:6])  # type: ignore[return-value]


def epoch_iso(epoch: int | None) -> str:
    """`epoch` as an ISO time in seconds, UTC (the form of an entry's `created`); 1970-01-01 when None."""
    return datetime.fromtimestamp(epoch or 0, timezone.utc).isoformat(timespec="seconds")


def member_info(name: str, executable: bool, date_time: tuple[int, int, int, int, int, int]) -> zipfile.ZipInfo:
    """The ZipInfo of one wheel member: fixed time, Unix mode 0644/0755, DEFLATE."""
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.create_system = 3  # Unix, so that external_attr carries the mode
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


class _FixedTimeWheelFile(WheelFile):
    """WheelFile whose RECORD (written by its close() under a bare name) gets the fixed ZipInfo too."""

    def __init__(self, file: Path, date_time: tuple[int, int, int, int, int, int]) -> None:
        self._date_time = date_time
        super().__init__(file, "w")

    def writestr(self, zinfo_or_arcname, data, compress_type=None) -> None:  # noqa: ANN001 - WheelFile's
        if isinstance(zinfo_or_arcname, str):
            zinfo_or_arcname = member_info(zinfo_or_arcname, False, self._date_time)
        super().writestr(zinfo_or_arcname, data, compress_type)


def wheel_filename(name: str, version: str, tag: Tag) -> str:
    """`<name>-<version>-<tag>.whl` with the name and version normalised (PEP 427/491/503), checked
    by parsing it back (ValueError if it does not parse to the same name, version and one tag)."""
    canonical, ver = canonicalize_name(name), Version(version)
    filename = f"{canonical.replace('-', '_')}-{ver}-{tag}.whl"
    parsed_name, parsed_version, build, tags = parse_wheel_filename(filename)
    if (parsed_name, parsed_version, build, tags) != (canonical, ver, (), frozenset({tag})) \
            or parse_tag(str(tag)) != frozenset({tag}):
        raise ValueError(f"wheel file name {filename!r} does not parse back to {canonical} {ver} {tag}")
    return filename


def write_wheel(out_dir: Path, name: str, version: str, tag: Tag, files: Mapping[str, WheelMember], *,
                metadata: list[tuple[str, str]], entry_points: dict[str, dict[str, str]],
                description: str = "", date_time: tuple[int, int, int, int, int, int] | None = None,
                generator: str = "kernelforge") -> Path:
    """Write `<name>-<version>-<tag>.whl` into `out_dir` and return its path.

    `files` maps archive paths (posix, relative) to their content; `metadata` is the METADATA
    header fields after Metadata-Version/Name/Version (e.g. ("Requires-Dist", "x==1")), in order;
    `entry_points` maps group -> {name: value}; `date_time` is every member's timestamp (default:
    from $SOURCE_DATE_EPOCH, see `zip_date_time`); `generator` goes into WHEEL."""
    if date_time is None:
        date_time = zip_date_time(source_date_epoch())
    filename = wheel_filename(name, version, tag)
    meta_lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {Version(version)}",
                  *(f"{k}: {v}" for k, v in metadata)]
    meta = "\n".join(meta_lines) + "\n"
    if description:
        meta += "Description-Content-Type: text/plain\n\n" + description.rstrip("\n") + "\n"
    wheel = f"Wheel-Version: 1.0\nGenerator: {generator}\nRoot-Is-Purelib: false\nTag: {tag}\n"
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(items.items())) + "\n"
                  for group, items in sorted(entry_points.items()))
    for path in files:
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") for p in parts) or ".dist-info" in parts[0]:
            raise ValueError(f"wheel member {path!r} is not a plain relative path outside .dist-info")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / filename
    # WheelFile names the .dist-info after the file name: write under the final name in a private
    # directory beside the target, then move it into place.
    tmp_dir = Path(tempfile.mkdtemp(prefix=".wheel-", dir=out_dir))
    tmp = tmp_dir / filename
    try:
        wf = _FixedTimeWheelFile(tmp, date_time)
        try:
            info_dir = wf.dist_info_path
            dist_files = {f"{info_dir}/METADATA": meta, f"{info_dir}/WHEEL": wheel,
                          f"{info_dir}/entry_points.txt": eps}
            for path, f in sorted(files.items()):
                wf.writestr(member_info(path, f.executable, date_time), f.data)
            for path, text in sorted(dist_files.items()):
                wf.writestr(member_info(path, False, date_time), text.encode("utf-8"))
            wf.close()
        except BaseException:
            _abandon(wf)
            raise
        tmp.replace(target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def _abandon(wf: zipfile.ZipFile) -> None:
    """Close a zip being written without finishing it (after a failed write, e.g. a full disk):
    close() would write RECORD and the central directory again, fail again, and leave the file to
    the garbage collector, whose close() prints the error as "Exception ignored"."""
    fp, wf.fp = wf.fp, None  # close() and __del__ return at once without fp
    if fp is not None:
        try:
            fp.close()
        except OSError:
            pass
