"""Test helpers a family may import (public): the docs/numerics.md references of the block-scaled
formats, byte-exact comparison, poisoned outputs, random and rotating inputs, the pytest
hooks of GPU tests (`kernelforge.testing.pytest_plugin`), and the CLI in a fresh process for CPU
tests (`run_cli`, `explain_json`). Imports torch.
"""
from kernelforge.ops.calibration import global_scale_of_amax

from .checks import assert_matches, forbidding_checked_path, op_kwargs, random_input
from .cli_process import Explained, child_env, explain_json, run_cli
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

__all__ = ["POISON_BYTE", "Explained", "RotatingInputs", "assert_matches", "child_env", "dequantize_ref",
           "e2m1_decode", "e2m1_encode", "e4m3_decode", "e4m3_encode", "explain_json", "forbidding_checked_path",
           "from_swizzled", "global_scale_of_amax", "nvfp4_global_scale_ref", "op_kwargs", "pack_fp4", "poison",
           "quantize_ref", "random_input", "rotating_inputs", "run_cli", "to_swizzled", "ue8m0_decode", "unpack_fp4"]
