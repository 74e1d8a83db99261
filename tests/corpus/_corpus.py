"""What the corpus modules share: the hypothesis profile, a watchdog against hangs, and the tally
that tests/corpus/conftest.py prints at the end of the run (cases, crashes, hangs, data loss).

Determinism: every property runs under the "kernelforge-corpus" profile, derandomized and without
an example database, so CI runs the same examples every time; `max_examples` is set per
property so that the whole corpus takes about a minute or two on a 2-core machine. Set
KF_CORPUS_SCALE=4 to run four times as many examples, randomized instead (still without a
database; a failure prints the example and a @reproduce_failure blob to replay it).

Each case runs under `time_limit` (SIGALRM, main thread) besides hypothesis' deadline: a case that
blocks (a FIFO opened for reading, a network wait) is interrupted and counted as a hang.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("KF_CORPUS_SCALE", "1") or 1))
PROFILE = "kernelforge-corpus"
settings.register_profile(
    PROFILE, derandomize=SCALE == 1, database=None, deadline=None, print_blob=SCALE > 1,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture, HealthCheck.large_base_example],
)


def corpus_settings(max_examples: int, deadline_s: float) -> settings:
    """The profile with this property's example count (times KF_CORPUS_SCALE) and per-case deadline."""
    return settings(settings.get_profile(PROFILE), max_examples=max_examples * SCALE,
                    deadline=deadline_s * 1000.0)


class Hang(BaseException):
    """A case ran past its time limit (a BaseException: product code catching Exception cannot swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` (interrupting a blocking system call)."""
    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Tally:
    """One target's counts; `problems` holds (kind, input, detail) for crashes, hangs, data loss."""

    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)  # e.g. "loaded", "SpecError", "exit 2"
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    known: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # bug -> inputs
    seconds: float = 0.0


TALLY: dict[str, Tally] = defaultdict(Tally)
STARTED = time.monotonic()
PROBLEM_KINDS = ("traceback", "hang", "data loss", "wrong error", "bad output")


# Open product bugs the corpus hits, by id. A generated case that hits one is counted, not failed
# (so that the rest of its property still guards everything else); tests/corpus/test_fault_cases.py
# holds an xfail(strict=True) case for each, which starts failing once the bug is fixed: then remove
# the entry here and the xfail mark there.
KNOWN_BUGS: dict[str, str] = {
    "key-file-is-directory": "a key file that is a directory (`cache sign --key DIR`, `package --sign-key DIR`, "
                             "`--trusted-keys DIR`, also `--key ''`) ends in an IsADirectoryError traceback "
                             "(kernelforge/cache/read/signing.py reads it without a check)",
    "key-generate-empty-path": "`kernelforge key generate ''` ends in a ValueError traceback (\"PosixPath('.') has "
                               "an empty name\", kernelforge/cache/read/signing.py generate_key)",
    "export-into-cache": "`kernelforge cache export ROOT/v1/index.json` writes the bundle over the cache's own "
                         "index: every entry drops out of the index (`cache repair` recovers them)",
    "size-cap-data-loss": "with $KERNELFORGE_MAX_INDEX_BYTES below the size of the index and the entries' "
                          "meta.json, `cache clean` deletes every intact entry directory as debris (\"removed 0 "
                          "entries and 5 orphan dirs\") and `cache repair` rewrites the index with no entry",
    "explain-negative-m": "`kernelforge explain OP m=-5 k=64 ...` explains a call with M < 0 (exit 0; also "
                          "align=0, stride=-3) instead of a user error; its JSON has m = -5",
    "quantize-empty-k": "kernelforge.quantize(x) with K = 0 and x not 2-D (e.g. torch.zeros(0)) raises torch's "
                        "RuntimeError from x.reshape(-1, 0) (kernelforge/ops/quantize.py) instead of ValueError",
    "offsets-dtype": "kernelforge.group_offsets_valid(offsets, t) does not check offsets' dtype: float8 or "
                     "complex offsets raise torch's NotImplementedError (kernelforge/ops/quantize_grouped.py)",
}


def count(target: str, outcome: str, seconds: float = 0.0) -> None:
    t = TALLY[target]
    t.cases += 1
    t.outcomes[outcome] += 1
    t.seconds += seconds


def problem(target: str, kind: str, given: str, detail: str) -> str:
    """Record a problem and return the assertion message naming it."""
    TALLY[target].problems.append((kind, given, detail))
    return f"{kind}: {detail}\ninput: {given}"


def known(target: str, bug: str, given: str, seconds: float = 0.0) -> None:
    """A case that hit a known, open product bug (tolerated here; a strict xfail case tracks it)."""
    assert bug in KNOWN_BUGS, bug
    TALLY[target].known[bug].append(given)
    count(target, f"known bug {bug}", seconds)


def summary_lines() -> list[str]:
    if not TALLY:
        return []
    total = sum(t.cases for t in TALLY.values())
    lines = [f"kernelforge corpus: {total} cases in {time.monotonic() - STARTED:.0f} s "
             f"(profile {PROFILE}, scale {SCALE}, {'derandomized' if SCALE == 1 else 'random'})"]
    for name, t in sorted(TALLY.items()):
        outcomes = ", ".join(f"{o} {n}" for o, n in t.outcomes.most_common())
        lines.append(f"  {name}: {t.cases} cases ({t.seconds:.1f} s): {outcomes}")
    kinds = Counter(k for t in TALLY.values() for k, _, _ in t.problems)
    lines.append("  problems: " + ", ".join(f"{k} {kinds.get(k, 0)}" for k in PROBLEM_KINDS))
    for name, t in sorted(TALLY.items()):
        seen = set()
        for kind, given, detail in t.problems:
            if (kind, detail) not in seen:
                seen.add((kind, detail))
                lines.append(f"    {name}: {kind}: {detail[:300]}\n      input: {given[:300]}")
    bugs = {(name, bug): inputs for name, t in TALLY.items() for bug, inputs in t.known.items()}
    if bugs:
        lines.append("  known open bugs hit (tolerated; each has an xfail(strict=True) case):")
        for (name, bug), inputs in sorted(bugs.items()):
            lines.append(f"    {name}: [{bug}] {KNOWN_BUGS[bug]}: {len(inputs)} case(s), e.g. {inputs[0][:200]}")
    return lines
