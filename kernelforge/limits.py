"""Limits shared by the runtime's argument checks, the references and the tests (cutlass- and
torch-free).

The kernels (`kernelforge/kernels/`) keep their own copies of the values they compile with:
their bytes are hashed into every cache key, so they import nothing new. `tests/ops/
test_limits.py` checks that each copy there equals the one here.
"""
from __future__ import annotations

MAX_BLOCKS = 2**31 - 1  # scale blocks per call: the kernels index them with 32-bit integers
MAX_GROUPS = 1024  # groups of one quantize_grouped call (the kernel's shared-memory tables)
TILE_M = 64  # rows per tile of the columnwise/dual kernels (families/quantize_columnwise/kernel.py)
TILE_BLOCKS = 4  # scale blocks per tile row of those kernels (families/quantize_columnwise/kernel.py)
MAX_M_TILES = 65535  # M tiles run on the grid's y dimension
RHT_SIZE = 16  # the Hadamard transform runs over 16 consecutive rows (one NVFP4 block)
RHT_SIGN_MASK = 0xD7E8  # docs/numerics.md's default sign mask of the random Hadamard transform
