"""docs/settings.md lists exactly the KERNELFORGE_* environment variables the package reads, and
the README's "Command line" section links it."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "settings.md"
NAME = r"KERNELFORGE_[A-Z0-9_]+"
# Reads: os.environ.get("X"), os.environ["X"], environ.get("X"), os.getenv("X"), env.get("X"), and
# module constants naming one (CACHE_ENV = "KERNELFORGE_CACHE_DIR"), which the module then reads.
READS = [
    re.compile(rf"""(?:environ|env|getenv)\s*(?:\.get\s*\(|\[|\()\s*["']({NAME})["']"""),
    re.compile(rf"""^[ \t]*[A-Z][A-Z0-9_]*[ \t]*(?::[^=\n]+)?=[ \t]*["']({NAME})["']""", re.M),
]


def code_names() -> dict[str, str]:
    """name -> the first file reading it."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "kernelforge").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in READS:
            for name in pattern.findall(text):
                found.setdefault(name, str(path.relative_to(REPO)))
    return found


def page_names() -> set[str]:
    """The variables of the page's tables (a row's first cell)."""
    return set(re.findall(rf"^\|\s*`({NAME})`\s*\|", PAGE.read_text(encoding="utf-8"), re.M))


def test_the_patterns_find_the_known_reads() -> None:
    names = code_names()
    for known in ("KERNELFORGE_CACHE_DIR", "KERNELFORGE_REQUIRE_GPU", "KERNELFORGE_SPEC_DIR", "KERNELFORGE_LOG"):
        assert known in names, known


def test_every_variable_read_is_documented() -> None:
    missing = {n: f for n, f in code_names().items() if n not in page_names()}
    assert not missing, f"read by the code, missing from docs/settings.md: {missing}"


def test_the_page_lists_no_variable_the_code_no_longer_reads() -> None:
    stale = page_names() - set(code_names())
    assert not stale, f"docs/settings.md lists variables no code reads: {sorted(stale)}"


def test_the_readme_command_line_section_links_the_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    assert "docs/settings.md" in section
