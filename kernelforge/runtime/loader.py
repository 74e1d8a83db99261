"""Load one cached module: check its sha256, load its runtime library once, then tvm_ffi."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import tvm_ffi  # imported with the ops, so a variant's first call pays only load + launch

from ..errors import CorruptArtifact

_lock = threading.Lock()
_modules: dict[str, Any] = {}  # main path -> loaded tvm_ffi module (kept alive for the process)
_checked: set[str] = set()  # files whose sha256 matched


def _check_sha256(path: Path, expected: str, what: str) -> None:
    key = str(path)
    if key in _checked:
        return
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CorruptArtifact(f"{what} {path} is missing or unreadable ({exc}); rebuild it with `kernelforge build`") from None
    if digest != expected:
        raise CorruptArtifact(
            f"{what} {path} is corrupt: sha256 {digest[:16]}... does not match the recorded "
            f"{expected[:16]}...; run `kernelforge cache verify` and rebuild with `kernelforge build`"
        )
    _checked.add(key)


def read_verified_json(entry: dict[str, Any]) -> Any:
    """The JSON content of an entry's main file, after checking its sha256."""
    path = Path(entry["main_path"])
    _check_sha256(path, entry["sha256"], entry.get("kind", "cache") + " file")
    return json.loads(path.read_text(encoding="utf-8"))


def load_function(entry: dict[str, Any], runtime_entry: dict[str, Any] | None) -> Any:
    """The tvm_ffi function of a kernel index entry (as returned by load_index_for_runtime)."""
    path = Path(entry["main_path"])
    with _lock:
        mod = _modules.get(str(path))
        if mod is None:
            if runtime_entry is not None:
                # The module finds its runtime library through RUNPATH; check that file's bytes first.
                _check_sha256(Path(runtime_entry["main_path"]), runtime_entry["sha256"], "runtime library")
            _check_sha256(path, entry["sha256"], "kernel module")
            mod = tvm_ffi.load_module(str(path))
            _modules[str(path)] = mod
    return mod[entry["extra"]["symbol"]]
