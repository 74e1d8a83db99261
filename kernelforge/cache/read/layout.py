"""Where everything lives inside a cache root (one schema version per subdirectory).

```
<root>/v1/index.json                     the commit marker: key -> entry metadata
<root>/v1/artifacts/<key[:2]>/<key>/     one kernel artifact (module.so, meta.json, ...)
<root>/v1/runtime/<key>/                 a shared runtime library, stored as an entry too
<root>/v1/locks/                         one lock file per key, plus index.lock
<root>/v1/tmp/                           private staging dirs (same filesystem as artifacts)
<root>/v1/quarantine/                    damaged entries moved aside by `cache repair` / `build --verify`
```
"""

import re
from pathlib import Path
from typing import NamedTuple

from kernelforge.errors import CacheError

SCHEMA_VERSION = 1
KINDS = ("kernel", "runtime", "tuning")
INDEX_NAME = "index.json"
META_NAME = "meta.json"

# Keys become directory and lock-file names, so they must not contain separators or dots only.
_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{1,254}")


def runtime_lib_name(runtime_key: str) -> str:
    """The file name (and soname) of the shared runtime library of `runtime_key`."""
    # A key-specific soname: two toolchains' runtimes can live in one process without clashing.
    return f"libkfrt-{runtime_key[:16]}.so"


def check_key(key: str) -> str:
    """Return `key` if it is usable as a directory name, else raise CacheError."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise CacheError(
            f"invalid cache key {key!r}: expected 2-255 characters of [A-Za-z0-9_.-], "
            "starting with a letter or digit (normally a sha256 hex digest)"
        )
    return key


def check_kind(kind: str) -> str:
    """Return `kind` if it is one of KINDS, else raise CacheError."""
    if kind not in KINDS:
        raise CacheError(f"invalid entry kind {kind!r}: expected one of {', '.join(KINDS)}")
    return kind


class Layout(NamedTuple):
    """The paths of one cache root for the current schema version.

    A NamedTuple rather than a frozen dataclass: it is created at every `import kernelforge.ops`,
    where a NamedTuple class is several times cheaper to create than a frozen dataclass."""

    root: Path

    @property
    def schema_root(self) -> Path:
        return self.root / f"v{SCHEMA_VERSION}"

    @property
    def index(self) -> Path:
        return self.schema_root / INDEX_NAME

    @property
    def artifacts(self) -> Path:
        return self.schema_root / "artifacts"

    @property
    def runtime(self) -> Path:
        return self.schema_root / "runtime"

    @property
    def locks(self) -> Path:
        return self.schema_root / "locks"

    @property
    def tmp(self) -> Path:
        return self.schema_root / "tmp"

    @property
    def quarantine(self) -> Path:
        return self.schema_root / "quarantine"

    @property
    def index_lock(self) -> Path:
        return self.locks / "index.lock"

    def key_lock(self, key: str) -> Path:
        return self.locks / f"{check_key(key)}.lock"

    def entry_rel(self, key: str, kind: str) -> str:
        """The entry directory of `key`, relative to the schema root (posix form, as stored)."""
        return self.entry_rel_of(key, kind)

    @staticmethod
    def entry_rel_of(key: str, kind: str) -> str:
        """entry_rel without a root: where an entry of `key` and `kind` lives, and nowhere else."""
        check_key(key)
        if check_kind(kind) == "runtime":
            return f"runtime/{key}"
        return f"artifacts/{key[:2]}/{key}"

    def entry_dir(self, key: str, kind: str) -> Path:
        return self.schema_root / self.entry_rel(key, kind)

    def resolve(self, rel: str) -> Path:
        """An entry's stored relative path as an absolute path; refuses paths leaving the schema root."""
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise CacheError(f"invalid entry path {rel!r} in {self.index}")
        return self.schema_root / rel

    def artifact_dirs(self) -> list[Path]:
        """Every entry-shaped directory on disk, whether indexed or not."""
        found: list[Path] = []
        if self.artifacts.is_dir():
            for prefix in sorted(self.artifacts.iterdir()):
                if prefix.is_dir():
                    found.extend(sorted(p for p in prefix.iterdir() if p.is_dir()))
        if self.runtime.is_dir():
            found.extend(sorted(p for p in self.runtime.iterdir() if p.is_dir()))
        return found
