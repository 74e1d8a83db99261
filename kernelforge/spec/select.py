"""Filter enumerated variants by name pattern and target architecture."""
from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from kernelforge.errors import SpecError
from kernelforge.schema import ARCHES
from kernelforge.spec.model import Variant


def select(variants: Iterable[Variant], *, only: list[str] | None = None,
           archs: list[str] | None = None) -> list[Variant]:
    """The variants, in order, whose name matches any `only` glob and whose arch is in `archs`.

    None (or an empty list) means no filter on that side. An unknown arch is a SpecError
    listing the known ones.
    """
    if archs:
        unknown = [a for a in archs if a not in ARCHES]
        if unknown:
            raise SpecError(f"unknown arch {', '.join(map(repr, unknown))}; "
                            f"known: {list(ARCHES)}")
    out = []
    for v in variants:
        if only and not any(fnmatchcase(v.name, pat) for pat in only):
            continue
        if archs and v.get("arch") not in archs:
            continue
        out.append(v)
    return out
