"""Test helpers a family may import (public): the docs/numerics.md references of the block-scaled
formats, byte-exact comparison, poisoned outputs, random and rotating inputs, and the pytest
hooks of GPU tests (`kernelforge.testing.pytest_plugin`). Imports torch.
"""
from kernelforge.ops.calibration import global_scale_of_amax

from .checks import assert_matches, forbidding_checked_path, op_kwargs, random_input
from .inputs import POISON_BYTE, RotatingInputs, poison, rotating_inputs
from .references import (
    dequantize_ref,
    e2m1_decode,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    from_swizzled,
    nvfp4_global_scale_ref,
    pack_fp4,
    quantize_ref,
    to_swizzled,
    ue8m0_decode,
    unpack_fp4,
)

__all__ = ["POISON_BYTE", "RotatingInputs", "assert_matches", "dequantize_ref", "e2m1_decode", "e2m1_encode",
           "e4m3_decode", "e4m3_encode", "forbidding_checked_path", "from_swizzled", "global_scale_of_amax",
           "nvfp4_global_scale_ref", "op_kwargs", "pack_fp4", "poison", "quantize_ref", "random_input",
           "rotating_inputs", "to_swizzled", "ue8m0_decode", "unpack_fp4"]
