"""Shared helpers for the cache tests (a plain module, so spawned worker processes can import it)."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Callable

from kernelforge.cache import CacheStore


def key_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def meta(name: str = "quant_mxfp8_k128", *, kind: str = "kernel", op: str = "quantize", arch: str = "sm_90a",
         toolchain_id: str = "tc-aaaa", source_hash: str = "src-1", **over: Any) -> dict[str, Any]:
    """publish() keyword arguments for a fake variant."""
    out = dict(kind=kind, op=op, name=name, variant={"format": "mxfp8", "block_k": 128}, arch=arch,
               toolchain_id=toolchain_id, toolchain={"cutlass_dsl": "4.8.1"}, source_hash=source_hash,
               main_file="module.so", build_time_s=0.01)
    out.update(over)
    return out


def fake_build(payload: bytes = b"\x7fELF fake module", **meta_kw: Any) -> Callable[[Path], dict[str, Any]]:
    """A build function writing module.so (and a small sidecar) into the staging dir."""
    def build(staging: Path) -> dict[str, Any]:
        (staging / "module.so").write_bytes(payload)
        (staging / "sub").mkdir()
        (staging / "sub" / "kernel.ptx").write_text("// ptx\n")
        return meta(**meta_kw)
    return build


RKEY = key_of("runtime")
KEYS = {"a": key_of("a"), "b": key_of("b")}


def runtime_and_two_kernels(root: Path, payloads: dict[str, bytes] | None = None) -> CacheStore:
    """A cache at `root` holding a runtime library (RKEY) and two kernels that link it (KEYS,
    named quant_a and quant_b; their module bytes from `payloads` where given)."""
    s = CacheStore(root)
    s.get_or_build(RKEY, fake_build(b"runtime lib", kind="runtime", op="runtime", name="runtime-x"))
    for n, key in KEYS.items():
        data = (payloads or {}).get(n, n.encode() * 64)
        s.get_or_build(key, fake_build(data, name=f"quant_{n}", extra={"runtime_key": RKEY}))
    return s


def append_line(log: str, line: str) -> None:
    # O_APPEND makes each small write atomic with respect to the other processes' writes.
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def concurrent_worker(root: str, keys: list[str], log: str) -> None:
    """Run get_or_build over `keys`; every real build and every result is logged."""
    store = CacheStore(root)
    for key in keys:
        def build(staging: Path, key: str = key) -> dict[str, Any]:
            append_line(log, f"build {key} {os.getpid()}")
            time.sleep(0.05)
            (staging / "module.so").write_bytes(key.encode() * 100)
            return meta(name=f"variant-{key[:6]}")
        t0 = time.monotonic()
        entry, built = store.get_or_build(key, build)
        append_line(log, f"got {entry.key} {int(built)} {os.getpid()} {time.monotonic() - t0:.3f}")


KILLED_BUILDER = """
import sys, time
from pathlib import Path
from kernelforge.cache import CacheStore
root, key, marker = sys.argv[1:4]
def build(staging):
    (staging / "module.so").write_bytes(b"half written")
    Path(marker).write_text("building")
    time.sleep(120)
CacheStore(root).get_or_build(key, build)
"""
