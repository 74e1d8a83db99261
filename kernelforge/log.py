"""`KERNELFORGE_LOG=info|debug`: the runtime's trace through Python logging (off by default).

Loggers live under "kernelforge" (e.g. "kernelforge.runtime"). With the variable unset nothing
is configured: the runtime's log calls sit behind `isEnabledFor` checks on paths taken once per
new (op, shape bucket) or module load, never per kernel call. An application that configures
logging itself can enable the same loggers without the variable.
"""
from __future__ import annotations

import logging
import os

LOG_ENV = "KERNELFORGE_LOG"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_from_env() -> None:
    """Attach one stderr handler to the "kernelforge" logger at $KERNELFORGE_LOG's level (once)."""
    level = _LEVELS.get(os.environ.get(LOG_ENV, "").strip().lower())
    if level is None:
        return
    logger = logging.getLogger("kernelforge")
    if not any(getattr(h, "_kernelforge_env", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("kernelforge %(levelname)s %(name)s: %(message)s"))
        handler._kernelforge_env = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
