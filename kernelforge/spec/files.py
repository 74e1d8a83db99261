"""Which spec files a command reads: the CLI's, else $KERNELFORGE_SPEC_DIR's, else every
registered op family's own (`kernelforge.registry.spec_files`)."""
from __future__ import annotations

import os
from pathlib import Path

from kernelforge.config import resolve_spec_paths as _resolve
from kernelforge.registry import spec_files


def resolve_spec_paths(cli_values: list[str | os.PathLike[str]] | None = None) -> list[Path]:
    """See `kernelforge.config.resolve_spec_paths`; the defaults are the families' spec files."""
    return _resolve(cli_values, spec_files)
