"""kf_silu_quant: SiLU-and-mul fused with block-scaled quantization, a kernelforge op family.

Importing the package imports neither torch nor cutlass: the op lives in `kf_silu_quant.ops`,
the reference in `kf_silu_quant.reference`, the family in `kf_silu_quant.family`.
"""
__version__ = "0.1.0"
