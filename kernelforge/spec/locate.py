"""Best-effort line numbers for spec errors, found by searching the file text.

tomllib reports no positions for valid TOML, so this scans for table headers and `key =`
lines. It understands the plain style the specs use; anything else yields None.
"""
from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_ANY_KEY = re.compile(r"^\s*[\w\"'.-]+\s*=")


def _strip_comment(line: str) -> str:
    # Good enough for spec files: no '#' inside the strings they hold.
    return line.split("#", 1)[0]


def _value_pattern(value: object) -> re.Pattern[str]:
    if isinstance(value, str):
        return re.compile(r"([\"'])" + re.escape(value) + r"\1")
    return re.compile(r"(?<![\w.])" + re.escape(str(value).lower()) + r"(?![\w.])")


def find_line(text: str, table: str | None = None, key: str | None = None,
              value: object = None, occurrence: int = 0) -> int | None:
    """1-based line of `key` (and `value`, if given) in `[table]`.

    `table=None` is the top level; for an array of tables (`[[exclude]]`) `occurrence`
    picks the n-th one. Without `key`, the line of the table header.
    """
    lines = text.splitlines()
    current: str | None = None
    seen = -1
    in_target = table is None
    key_line: int | None = None
    key_re = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*=") if key else None
    value_re = _value_pattern(value) if value is not None else None
    for i, raw in enumerate(lines, 1):
        line = _strip_comment(raw)
        m = _HEADER.match(line)
        if m:
            if key_line is not None:
                break  # the key's value ended at the previous table
            current = m.group(2)
            in_target = current == table and (m.group(1) == "[" or (seen := seen + 1) == occurrence)
            if in_target and key is None:
                return i
            continue
        if not in_target:
            continue
        if key_line is None and key_re is not None and key_re.match(line):
            key_line = i
            line = line[key_re.match(line).end():]
        elif key_line is not None and _ANY_KEY.match(line):
            break  # the next key: the value was not on the key's lines
        if key_line is not None:
            if value_re is None or value_re.search(line):
                return i
    return key_line
