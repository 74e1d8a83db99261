"""One cache entry's metadata: what was built, from what, with which toolchain, and its files."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from kernelforge.cache.read.layout import Layout
from kernelforge.errors import CacheError

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # a path component: no "", ".", ".." or hidden names


@dataclass(frozen=True)
class Entry:
    """A published artifact (a kernel module or a shared runtime library).

    `files` maps each file's path inside the entry directory (posix form) to
    {"sha256": hex, "size": bytes}; `path` is the entry directory relative to the schema root.
    """

    key: str
    kind: str
    op: str
    name: str
    variant: dict[str, Any]
    arch: str
    toolchain_id: str
    toolchain: dict[str, Any]
    source_hash: str
    files: dict[str, dict[str, Any]]
    main_file: str
    build_time_s: float
    created: str
    path: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        # The generated hash would fail on the dict fields; equal entries always share a key.
        return hash(self.key)

    @property
    def sha256(self) -> str:
        """sha256 of the main file (what the runtime checks before loading it)."""
        return self.files[self.main_file]["sha256"]

    @property
    def size(self) -> int:
        """Total bytes of all files of the entry."""
        return sum(int(f["size"]) for f in self.files.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the form stored in index.json and meta.json)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Entry":
        """Rebuild an Entry from `to_json()` output; raise CacheError if fields are missing or malformed."""
        if not isinstance(data, Mapping):
            raise CacheError(f"entry metadata is {type(data).__name__}, expected an object")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n != "extra" and n not in data]
        if missing:
            raise CacheError(f"entry metadata lacks {', '.join(missing)}")
        values = {n: data[n] for n in names if n in data}
        files = values["files"]
        if not isinstance(files, Mapping) or values["main_file"] not in files:
            raise CacheError(f"entry {values['key']!r}: main file {values['main_file']!r} not among its files")
        for fname, info in files.items():
            if not isinstance(fname, str) or not all(_PLAIN.fullmatch(p) for p in fname.split("/")):
                raise CacheError(f"entry {values['key']!r}: file name {fname!r} is not a plain relative path")
            if not isinstance(info, Mapping) or "sha256" not in info or "size" not in info:
                raise CacheError(f"entry {values['key']!r}: file {fname!r} lacks sha256/size")
        if values["path"] != Layout.entry_rel_of(values["key"], values["kind"]):
            raise CacheError(f"entry {values['key']!r}: path {values['path']!r} is not where its key lives")
        return cls(**values)
