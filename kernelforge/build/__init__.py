"""Compile op-family variants ahead of time: keys, the toolchain fingerprint, compile and link
one variant (no GPU, no tensors), the parallel driver, and the build use case (`pipeline`).

Public here: `variant_key` and `toolchain_fingerprint` (what a cache key is made of)."""
from kernelforge.lazy import lazy_exports

__all__ = ["toolchain_fingerprint", "variant_key"]

__getattr__, __dir__ = lazy_exports(__name__, {"variant_key": "keys", "toolchain_fingerprint": "toolchain"})
