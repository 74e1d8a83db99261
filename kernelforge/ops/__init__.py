"""The public torch-facing ops; importing this registers them as `torch.ops.kernelforge.*`."""
from ._common import set_cache_root
from .quantize import nvfp4_global_scale, quantize
from .quantize_grouped import quantize_experts, quantize_grouped
from .quantize_columnwise import quantize_nvfp4_rht, rht_global_scale
from .rmsnorm_quantize import add_rmsnorm_quantize, rmsnorm_quantize
from . import library  # noqa: E402,F401  (registers the torch.library custom ops)

__all__ = ["add_rmsnorm_quantize", "nvfp4_global_scale", "quantize", "rmsnorm_quantize", "set_cache_root",
           "quantize_nvfp4_rht", "rht_global_scale", "quantize_experts", "quantize_grouped"]
