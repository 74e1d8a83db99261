"""Prints the corpus's tally (tests/corpus/_corpus.py) at the end of the run, without -s."""
from __future__ import annotations

from tests.corpus import _corpus


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    lines = _corpus.summary_lines()
    if lines:
        terminalreporter.section("kernelforge corpus")
        for line in lines:
            terminalreporter.write_line(line)
