"""Content-addressed cache keys: sha256 of canonical JSON, never pickle."""
from __future__ import annotations

import hashlib
import json
from typing import Any

# Version of what the builder records in each entry (e.g. extra["dispatch"], read by the runtime):
# an older entry format is a different key, so it is rebuilt rather than served half-understood.
ENTRY_FORMAT = 2


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def variant_key(canonical_variant: dict[str, Any], src_hash: str, toolchain: dict[str, Any]) -> str:
    """The cache key of one variant: its coordinates (arch included), sources and toolchain."""
    return sha256_hex(
        canonical_json({"variant": canonical_variant, "source": src_hash, "toolchain": toolchain,
                        "entry_format": ENTRY_FORMAT})
    )


def runtime_key(toolchain: dict[str, Any]) -> str:
    """The key of the shared runtime library: only the link recipe and its inputs matter."""
    return sha256_hex(canonical_json({"runtime": toolchain["link"], "dsl": toolchain["cutlass_dsl"]}))
