"""`--rebuild-sample`: an independent check of incoming entries that needs no keys.

Builds are reproducible (same key, same bytes on any builder: `build --check-reproducible`), so a
receiver with the build extra can rebuild a random sample of the kernels a shard, bundle or
remote offers and compare each rebuilt module's sha256 with the one the source records (and
the transfer then checks the bytes against that record). One mismatch refuses the whole source:
it built something other than what its keys say. The idea is Debian's and Arch's independent
rebuilders (https://reproducible-builds.org/docs/).

Only keys this builder can derive from its own specs, kernel sources and toolchain can be
rebuilt; if none of the incoming kernels is such a key, the check cannot be made and the
source is refused (the user asked for it).
"""
from __future__ import annotations

import math
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from ..cache import CacheStore, Entry
from ..cache.store import sha256_file
from ..sources import source_hash
from .driver import build_variants
from .keys import variant_key
from .toolchain import toolchain


class Sample(NamedTuple):
    """How many incoming kernels to rebuild: `count` of them, or a `fraction` (at least one)."""

    count: int | None = None
    fraction: float | None = None

    def of(self, available: int) -> int:
        if self.count is not None:
            return min(self.count, available)
        return min(available, max(1, math.ceil((self.fraction or 0.0) * available)))


def parse_sample(text: str) -> Sample:
    """`3` (entries, ASCII digits) or `0.25` (a fraction in (0, 1]); ValueError naming the option otherwise."""
    text = text.strip()
    if text.isascii() and text.isdigit() and 1 <= int(text) <= 10**6:
        return Sample(count=int(text))
    try:
        value = float(text) if text.isascii() and "." in text else math.nan
    except ValueError:
        value = math.nan
    if math.isfinite(value) and 0 < value <= 1:
        return Sample(fraction=value)
    raise ValueError(f"--rebuild-sample {text!r}: expected a number of entries (1, 2, ...) or a fraction in (0, 1] "
                     "with a decimal point (0.1, 1.0)")


def rebuild_auditor(sample: Sample, spec_paths: Sequence[Path], *, jobs: int | None = None,
                    say: Callable[[str], None] = lambda line: None) -> Callable[[Sequence[Entry]], str | None]:
    """A check for transfers: given the incoming entries, None if a random sample of them rebuilds
    to the recorded bytes, else why the source is refused (see the module docstring)."""
    from ..spec import load_specs

    def audit(entries: Sequence[Entry]) -> str | None:
        kernels = [e for e in entries if e.kind == "kernel"]
        if not kernels:
            return None
        tc = toolchain()
        local: dict[str, Any] = {}
        for v in load_specs(list(spec_paths)):
            local[variant_key(v.canonical(), source_hash(v.op), tc)] = v
        rebuildable = [e for e in kernels if e.key in local]
        if not rebuildable:
            return (f"--rebuild-sample: none of its {len(kernels)} kernels is a key this builder derives from its "
                    "specs, kernel sources and toolchain, so none can be rebuilt to check it")
        picked = random.SystemRandom().sample(rebuildable, sample.of(len(rebuildable)))
        say(f"rebuilding {len(picked)} of {len(kernels)} incoming kernels to compare bytes")
        scratch = CacheStore(Path(tempfile.mkdtemp(prefix="kf-rebuild-audit-")) / "cache")
        try:
            build_variants([local[e.key] for e in picked], scratch, jobs=jobs)
            for entry in picked:
                rebuilt = scratch.get(entry.key)
                if rebuilt is None:
                    return f"--rebuild-sample: {entry.name} [{entry.key[:12]}] could not be rebuilt here"
                sha = sha256_file(scratch.entry_dir(rebuilt) / rebuilt.main_file)[0]
                if sha != entry.sha256:
                    return (f"--rebuild-sample: {entry.name} [{entry.key[:12]}] rebuilds to sha256 {sha[:16]}, "
                            f"the source records {entry.sha256[:16]}: it did not build what its key says")
        finally:
            shutil.rmtree(scratch.root.parent, ignore_errors=True)
        return None

    return audit
