"""What every command shares: exit codes, plain error lines, the selection with helpful --arch errors."""
from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

import typer
from rich.console import Console

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
NOT_A_TERMINAL_WIDTH = 100_000  # columns of a console whose output is not a terminal: no wrapping

EXIT_CODES_HELP = ("Exit codes (every command): 0 success; 1 a failure (a variant failed to build, a "
                   "verification problem, a refused entry); 2 a user error (bad arguments or values, an empty "
                   "selection, a missing or unwritable cache); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM).")


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def out_console(**kwargs: Any) -> Console:
    """The console of a command's stdout. Output that is not a terminal (a file, a pipe, a CI log)
    is never wrapped or cut: tables get their natural width, every line stays whole."""
    width = None if sys.stdout.isatty() else NOT_A_TERMINAL_WIDTH
    return Console(highlight=False, width=width, **kwargs)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: message` on stderr, verbatim (no rich markup: `[axes]` stays), and exit."""
    err_console().print(f"error: {message}", markup=False)
    raise typer.Exit(code)


def nearest(value: str, choices: Sequence[str]) -> str | None:
    """The choice `value` most likely meant: one it prefixes (sm_90 -> sm_90a), else the closest spelling."""
    prefixed = [c for c in choices if c.startswith(value)]
    if prefixed:
        return sorted(prefixed, key=len)[0]
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def select_or_exit(paths: Sequence[Path], only: list[str] | None, archs: list[str] | None) -> list[Any]:
    """The selected variants, or exit 2 with one line saying why none is selected: an unknown arch or an
    arch the specs do not declare (listing those they declare and the nearest), or a glob matching nothing."""
    from kernelforge.errors import KernelforgeError
    from kernelforge.spec import ARCHES, load_specs, select

    try:
        variants = load_specs(list(paths))
    except (KernelforgeError, ValueError) as exc:
        fail(str(exc))
    declared = sorted({str(v.get("arch")) for v in variants})
    named = select(variants, only=only) if only else variants
    for arch in archs or ():
        if arch not in declared:
            what = "unknown arch" if arch not in ARCHES else "no selected spec declares arch"
            guess = nearest(arch, declared) if arch not in ARCHES else None
            hint = f"; did you mean {guess}?" if guess else ""
            fail(f"{what} {arch!r}: the selected spec file(s) declare {', '.join(declared) or 'no arch'}{hint}")
    try:
        chosen = select(variants, only=only, archs=archs)
    except (KernelforgeError, ValueError) as exc:
        fail(str(exc))
    if not chosen:
        if only and not named:
            fail(f"no variant name matches --only {' '.join(repr(o) for o in only)} "
                 f"({len(variants)} variants in {len(paths)} spec file(s); `kernelforge specs show` lists them)")
        fail(f"no variant matches the selection (--only/--arch); the selected variants declare arches "
             f"{', '.join(sorted({str(v.get('arch')) for v in named})) or 'none'}")
    return chosen
