"""A pytest plugin of `kernelforge validate`: the session's outcome counts, as pytest's own
summary line counts them, written as JSON to the file named by $KERNELFORGE_OUTCOMES_FILE."""
from __future__ import annotations

import json
import os
from typing import Any

OUTCOMES_ENV = "KERNELFORGE_OUTCOMES_FILE"
# Categories of pytest's terminal summary that are not test outcomes.
_NOT_OUTCOMES = {"", "warnings", "deselected"}


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get(OUTCOMES_ENV)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not path or reporter is None:
        return
    counts = {cat: len(reports) for cat, reports in reporter.stats.items() if cat not in _NOT_OUTCOMES}
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"counts": counts, "exitstatus": int(exitstatus)}, f)
