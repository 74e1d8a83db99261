"""Moved: the shared references are `kernelforge.testing` (references.py), each family's own its
folder's reference.py (`kernelforge.families.<name>.reference`). The shared names resolve from
here for one release, with a DeprecationWarning."""
from kernelforge.lazy import moved_exports

__getattr__, __dir__ = moved_exports(__name__, {name: "kernelforge.testing.references" for name in (
    "e4m3_encode", "e4m3_decode", "e2m1_encode", "e2m1_decode", "pack_fp4", "unpack_fp4", "exp2_fp32", "ue8m0_scale",
    "ue8m0_decode", "swizzle_offset", "to_swizzled", "from_swizzled", "quantize_ref", "dequantize_ref",
    "nvfp4_global_scale_ref", "nvfp4_element_factor", "global_scale_of_amax")})
