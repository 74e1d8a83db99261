"""A crafted cache without a compiler: a runtime library and fake quantize kernels whose metadata
is what a build records (dispatch coordinates, K-class, runtime key), so that `explain`, `ls`,
`gc`, transfers and the rest run on it. Shared by tests/cli/test_json_schemas.py and tests/corpus/."""
from __future__ import annotations

import os
from pathlib import Path

from kernelforge.cache import CacheStore
from kernelforge.sources import source_hash

COORDS = {"format": "mxfp8", "scale_mode": "floor", "layout": "linear", "dtype": "bfloat16"}
KCLASSES = {"aligned": {"cluster": 1, "elements": 0, "k_multiple_blocks": 4, "max_k": 0, "name": "aligned",
                        "vector_bytes": 16},
            "any": {"cluster": 1, "elements": 0, "k_multiple_blocks": 1, "max_k": 0, "name": "any",
                    "vector_bytes": 0}}
RT_KEY = "r" * 64
VARIANT = "quantize.mxfp8.floor.linear.bfloat16.{kclass}.{arch}.t{threads}u1"


def publish(store: CacheStore, key: str, *, kind: str = "kernel", kclass: str = "aligned", arch: str = "sm_90a",
            src: str | None = None, size: int = 1000, threads: int = 128, payload: bytes | None = None) -> None:
    """Publish one fake entry (a runtime library, or a quantize kernel linking RT_KEY)."""
    def build(staging: Path) -> dict:
        name = "libkfrt-" + key[:16] + ".so" if kind == "runtime" else "module.so"
        (staging / name).write_bytes(payload if payload is not None else key.encode()[:1] * size)
        if kind == "runtime":
            return dict(kind="runtime", op="runtime", name=f"runtime-{key[:12]}", variant={}, arch="host",
                        toolchain_id="tc", toolchain={}, source_hash="", main_file=name, build_time_s=0.0)
        axes = {**COORDS, "arch": arch, "kclass": kclass, "threads": threads, "units_per_thread": 1}
        return dict(kind="kernel", op="quantize", name=VARIANT.format(kclass=kclass, arch=arch, threads=threads),
                    arch=arch, toolchain_id="tc", toolchain={"x": 1},
                    variant={"axes": axes, "kclass": KCLASSES[kclass], "op": "quantize"},
                    source_hash=source_hash("quantize") if src is None else src, main_file="module.so",
                    build_time_s=0.0, extra={"symbol": "kf_x", "runtime_key": RT_KEY, "dispatch": dict(COORDS)})
    store.get_or_build(key, build)


def crafted_cache(root: Path) -> CacheStore:
    """A runtime library, aligned/any builds for sm_90a, one sm_100a, one built from other sources."""
    root.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(root.parent, 0o755)
    store = CacheStore(root)
    publish(store, RT_KEY, kind="runtime", size=5_000)
    publish(store, "a" * 64, kclass="aligned")
    publish(store, "b" * 64, kclass="any")
    publish(store, "c" * 64, kclass="aligned", arch="sm_100a")
    publish(store, "d" * 64, kclass="aligned", threads=256, src="0" * 64)
    store.refresh_views()
    return store
