"""The repository states facts, not its history: the README stays a short front door, the package,
the README and docs/ carry no work-log references (sessions, dated runs, the retired
benchmarks/RESULTS.md; history lives in git), benchmarks/results/ holds only the current raw
outputs, and no comment in the package points outside the repository. No GPU, no compiler."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kernelforge"
README_MAX_LINES = 250
RESULTS_MAX_FILES = 30

# Work-log phrasing, case-insensitive. Only uses that date or sequence the work match: "session 7",
# "sessions 12-17", "Session 16's", "this session", "in session", "RESULTS.md, session 15", a run
# dated 2026-11-26. The word "session" alone is legitimate (pytest_sessionfinish(session),
# requests.Session, a session-scoped fixture).
HISTORY = re.compile(
    r"\bsessions?\s+\d+"
    r"|\b(?:this|that|previous|last|next|same)\s+session\b"
    r"|\bin\s+session\b(?![-\s]*scop)"
    r"|RESULTS\.md"
    r"|\b20\d\d-\d\d-\d\d\b",
    re.IGNORECASE,
)

# Paths outside the repository: the work area's sibling folders (../shared, notes/, the
# absolute checkout path) and relative paths that climb out of the package's depth.
OUTSIDE = re.compile(
    r"\.\./+(?:shared|notes|main)\b"
    r"|(?<![\w./-])(?:shared|notes)/"
    r"|/work/"
    r"|(?:\.\./){3,}",
    re.IGNORECASE,
)


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _package_files() -> list[Path]:
    files = [p for ext in ("*.py", "*.toml") for p in PACKAGE.rglob(ext)]
    return sorted(p for p in files if "__pycache__" not in p.parts)


def _doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _history_hits(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{_rel(path)}:{number}: {line.strip()}")
    return hits


def _comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment of a file: `#` comments, and for Python the docstrings."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        return [(n, line[line.index("#"):]) for n, line in enumerate(text.splitlines(), 1) if "#" in line]
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                first = body[0].lineno
                found += [(first + i, line) for i, line in enumerate(body[0].value.value.splitlines())]
    return sorted(found)


def test_readme_is_a_short_front_door() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference material into docs/")


def test_readme_and_docs_state_facts_not_history() -> None:
    hits = _history_hits(_doc_files())
    assert not hits, (f"{len(hits)} work-log references in README.md and docs/ (state the fact; history "
                      "stays in git):\n" + "\n".join(hits))


def test_package_states_facts_not_history() -> None:
    hits = _history_hits(_package_files())
    assert not hits, (f"{len(hits)} work-log references under kernelforge/ (*.py, *.toml; state the fact, "
                      "name a benchmark or docs/performance.md instead):\n" + "\n".join(hits))


def test_benchmark_results_hold_only_the_current_raw_outputs() -> None:
    root = REPO / "benchmarks" / "results"
    files = sorted(_rel(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    assert len(files) <= RESULTS_MAX_FILES, (
        f"benchmarks/results/ holds {len(files)} files (at most {RESULTS_MAX_FILES}: the current run's raw "
        "output that docs/performance.md cites):\n" + "\n".join(files))


def test_package_comments_cite_no_path_outside_the_repository() -> None:
    hits = [f"{_rel(path)}:{line}: {text.strip()}"
            for path in _package_files() for line, text in _comments(path) if OUTSIDE.search(text)]
    assert not hits, "comments under kernelforge/ citing paths outside the repository:\n" + "\n".join(hits)


def test_the_patterns_match_work_logs_only() -> None:
    for text in ("measured in session 7", "RESULTS.md, session 15", "(session 16's breakdown)", "sessions 12-17",
                 "this session", "in session", "on 2026-11-26"):
        assert HISTORY.search(text), text
    for text in ("def pytest_sessionfinish(session, exitstatus):", "requests.Session()", "a session-scoped fixture",
                 "session = boto3.session.Session()", "in session-scoped fixtures", "SOURCE_DATE_EPOCH 1980-01-01"):
        assert not HISTORY.search(text), text
    for text in ("see ../shared/notes.md", "notes/startup.md", "/work/main/x", "../../../x"):
        assert OUTSIDE.search(text), text
    for text in ("`../x.so` is refused", "~/.cache/kernelforge", "the shared helpers", "kernelforge/kernels/"):
        assert not OUTSIDE.search(text), text
