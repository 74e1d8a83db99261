"""Re-hash every file of every entry and report what does not match the index."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.store import Store, sha256_file

MISSING_DIR = "missing dir"
MISSING_FILE = "missing file"
SIZE_MISMATCH = "size mismatch"
SHA_MISMATCH = "sha256 mismatch"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one entry."""

    key: str
    name: str
    problem: str
    file: str = ""
    detail: str = ""

    def __str__(self) -> str:
        where = f" {self.file}" if self.file else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.name} [{self.key[:12]}]: {self.problem}{where}{detail}"


@dataclass
class VerifyReport:
    """Result of `verify`: problems make it fail; orphans are informational (clean removes them)."""

    root: Path
    entries: int = 0
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    orphans: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root), "ok": self.ok, "entries": self.entries, "files": self.files,
            "problems": [vars(p) for p in self.problems], "orphans": [str(p) for p in self.orphans],
        }


def verify(store: Store) -> VerifyReport:
    """Check every indexed entry's directory and files (existence, size, sha256)."""
    report = VerifyReport(root=store.root)
    for entry in store.iter_entries():
        report.entries += 1
        directory = store.entry_dir(entry)
        if not directory.is_dir():
            report.problems.append(Problem(entry.key, entry.name, MISSING_DIR, detail=str(directory)))
            continue
        for rel, info in entry.files.items():
            report.files += 1
            path = directory / rel
            if not path.is_file():
                report.problems.append(Problem(entry.key, entry.name, MISSING_FILE, rel))
                continue
            digest, size = sha256_file(path)
            if size != int(info["size"]):
                report.problems.append(Problem(entry.key, entry.name, SIZE_MISMATCH, rel,
                                               f"expected {info['size']} bytes, found {size}"))
            elif digest != info["sha256"]:
                report.problems.append(Problem(entry.key, entry.name, SHA_MISMATCH, rel,
                                               f"expected {info['sha256'][:16]}, found {digest[:16]}"))
    report.orphans = store.orphans()
    return report
