"""Pure-torch reference of `quantize` (docs/numerics.md): the shared block-scaled quantization
reference itself, which every quantizing family's reference builds on, and NVFP4 calibration."""
from kernelforge.testing.references import dequantize_ref, nvfp4_global_scale_ref, quantize_ref

__all__ = ["dequantize_ref", "nvfp4_global_scale_ref", "quantize_ref"]
