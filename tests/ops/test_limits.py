"""The kernels' copies of the shared limits equal `kernelforge.limits` (the kernels keep their own
copies because their bytes are hashed into every cache key)."""
from __future__ import annotations

import pytest

from kernelforge import limits


def test_kernel_copies_of_the_limits_agree():
    pytest.importorskip("cutlass", reason="the kernel modules import CuTe-DSL (the build extra)")
    from kernelforge.families.quantize_columnwise import kernel as quantize_tiled
    from kernelforge.families.quantize_grouped import kernel as quantize_grouped

    assert quantize_grouped.MAX_GROUPS == limits.MAX_GROUPS
    assert (quantize_tiled.TILE_M, quantize_tiled.TILE_BLOCKS, quantize_tiled.RHT_SIZE) == (
        limits.TILE_M, limits.TILE_BLOCKS, limits.RHT_SIZE)


def test_limits_import_neither_torch_nor_cutlass():
    import subprocess
    import sys

    code = "import sys, kernelforge.limits; print(sorted(m for m in ('torch', 'cutlass') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
