"""A read-only mapping over the op-family registry (`kernelforge.families`), evaluated on lookup.

What the older tables (`spec.schema.OP_SCHEMAS`, `sources.OP_SOURCES`) are now: views, never
copies. A leaf module, importing the registry only on lookup, so that `spec.schema`, which the
registry itself imports, can define its view at import time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


class FamilyView(Mapping[str, Any]):
    """op -> `project(family)` for every registered op family."""

    def __init__(self, project: Callable[[Any], Any]) -> None:
        self._project = project

    def __getitem__(self, op: str) -> Any:
        from kernelforge.families import get_family

        if not isinstance(op, str):
            raise KeyError(op)
        return self._project(get_family(op))

    def __contains__(self, op: object) -> bool:
        from kernelforge.families import find_family

        return isinstance(op, str) and find_family(op) is not None

    def __iter__(self) -> Iterator[str]:
        from kernelforge.families import families

        return iter(families())

    def __len__(self) -> int:
        from kernelforge.families import families

        return len(families())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"
