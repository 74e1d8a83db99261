"""Which compiled arch runs on which device capability."""
from __future__ import annotations

import re

_ARCH_RE = re.compile(r"sm_(\d+)(\d)([af]?)$")


def arch_specific(capability: tuple[int, int]) -> str:
    """The arch-specific target of a device of `capability` (e.g. sm_90a): what its exact builds
    and tuning tables are named by."""
    return f"sm_{capability[0]}{capability[1]}a"


def arch_runs_on(arch: str, capability: tuple[int, int]) -> int:
    """Preference (> 0) of `arch` on a device of `capability`; 0 when it cannot run there.

    "a" (arch-specific) SASS runs only on its exact capability; "f" (family) SASS runs on the
    same major with an equal or higher minor; plain SASS runs on an equal or higher minor too.
    Exact arch-specific code is preferred over family code.
    """
    m = _ARCH_RE.match(arch)
    if not m:
        return 0
    major, minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    if major != capability[0]:
        return 0
    if suffix == "a":
        return 3 if minor == capability[1] else 0
    return (2 if suffix == "f" else 1) if minor <= capability[1] else 0
