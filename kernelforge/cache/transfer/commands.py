"""push, pull, export and import as one call: `run_transfer(action, store, target, ...)`.

The four transfers differ in where the entries go (a remote store or a bundle file, to or from
the cache) and in the options each takes; what a command does around them is the same: pick the
transfer, pass it the options it takes, verify the cache afterwards if asked, hand back its
`TransferReport`. The CLI (`kernelforge cache push|pull|export|import`) is this call plus the
rendering of the report (`kernelforge.cli.transfer.show`).

Errors propagate as the transfers raise them: `Rejected` (the source as a whole failed
verification), `TransferError`/`CacheError` (the transfer cannot run).
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, NamedTuple, Sequence

from kernelforge.cache.maintenance.verification import verify
from kernelforge.cache.read.entry import Entry
from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer.bundle import export_bundle, import_bundle
from kernelforge.cache.transfer.common import TransferReport
from kernelforge.cache.transfer.provenance import Authority
from kernelforge.cache.transfer.remote import pull, push


class Transfer(NamedTuple):
    """One transfer: its function, the keyword options it takes, and whether it writes the local
    cache (pull and import may create it; push and export only read it, so it must exist)."""

    run: Callable[..., TransferReport]
    options: frozenset[str]
    writes_cache: bool


TRANSFERS: dict[str, Transfer] = {
    "push": Transfer(push, frozenset({"only", "keys", "dry_run"}), False),
    "pull": Transfer(pull, frozenset({"only", "keys", "missing_ok", "authority", "audit", "dry_run"}), True),
    "export": Transfer(export_bundle, frozenset({"only", "keys"}), False),
    "import": Transfer(import_bundle, frozenset({"authority", "audit", "dry_run"}), True),
}

_DONE = {"pull": "pulled", "import": "imported"}  # the transfers that write the cache, for the notes


def run_transfer(action: str, store: CacheStore, target: str | os.PathLike[str], *,
                 only: Iterable[str] | None = None, keys: Iterable[str] | None = None,
                 authority: Authority | None = None, audit: Callable[[Sequence[Entry]], str | None] | None = None,
                 missing_ok: bool = False, dry_run: bool = False, verify_after: bool = False) -> TransferReport:
    """Run the transfer `action` ("push", "pull", "export" or "import") between `store` and
    `target` (a remote store's URL, or a bundle file) and return its report.

    Each option goes to the transfer that takes it (see `TRANSFERS`; giving one to a transfer that
    does not is a TypeError). `verify_after` (a transfer that writes the cache) then verifies the
    whole cache: its problems and verdict become notes of the report, and `report.verified` says
    whether it passed (a dry run writes nothing, so it only notes that verify was skipped)."""
    transfer = TRANSFERS.get(action)
    if transfer is None:
        raise ValueError(f"unknown transfer {action!r}: expected one of {', '.join(TRANSFERS)}")
    given = {name: value for name, value in (("only", only), ("keys", keys), ("authority", authority),
                                             ("audit", audit), ("missing_ok", missing_ok), ("dry_run", dry_run))
             if value is not None and value is not False}
    unknown = sorted(set(given) - transfer.options) + (["verify_after"] if verify_after and not transfer.writes_cache
                                                       else [])
    if unknown:
        raise TypeError(f"{action} takes no {', '.join(unknown)}")
    report = transfer.run(store, target, **given)
    if verify_after and dry_run:
        report.notes.append(f"verify: skipped (--dry-run {_DONE[action]} nothing)")
    elif verify_after:
        checked = verify(store)
        report.notes.extend(f"verify: {p}" for p in checked.problems)
        report.notes.append(f"verify: {'OK' if checked.ok else 'FAILED'} ({checked.entries} entries)")
        report.verified = checked.ok
    return report
