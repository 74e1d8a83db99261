"""The origin a cache records for an entry that arrived from elsewhere (`extra.origin`), read by
the runtime's dispatch order and by ls/explain/verify. Imports nothing: it is on the runtime path.

Written by the receiving cache only (`kernelforge.cache.transfer.provenance`): {"via": "merge" | "import" |
"pull", "from": the source, "signer": key id or None}. An entry without it was built in this cache.
"""
from typing import Any

ORIGIN = "origin"


def origin_of(extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """The origin a cache recorded for an entry (None: built into this cache)."""
    origin = (extra or {}).get(ORIGIN)
    return origin if isinstance(origin, dict) else None


def origin_text(extra: dict[str, Any] | None, short: bool = False) -> str:
    """One phrase for ls/explain/verify: 'built here', or 'merge from X, signed by K' ('merge,
    signed by K' when `short`, for a table column)."""
    origin = origin_of(extra)
    if origin is None:
        return "built here"
    signer = origin.get("signer")
    where = "" if short else f" from {origin.get('from', '?')}"
    return f"{origin.get('via', '?')}{where}, " + (
        f"signed by {signer}" if signer else "UNSIGNED" if short else "UNSIGNED (accepted with --allow-unsigned)")


def origin_rank(extra: dict[str, Any] | None) -> int:
    """Preference among equally good builds: built here (2) > signed arrival (1) > unsigned (0).
    Dates mean nothing: a later arrival never shadows a local build."""
    origin = origin_of(extra)
    if origin is None:
        return 2
    return 1 if origin.get("signer") else 0
