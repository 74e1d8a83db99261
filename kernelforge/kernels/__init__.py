"""The shared CuTe-DSL helpers a family's kernel and builder may import (public; build time only:
everything here imports cutlass, never torch).

* Conversions (`convert`): bit-exact float <-> E4M3 / E2M1 / UE8M0 encodings and the integer
  and inline-PTX arithmetic they rest on (docs/numerics.md).
* Block scales (`BlockQuantizer` and the scale-layout helpers): one block's amax, scale and
  encoded elements; linear and swizzled scale offsets.
* Dependent launch (`PDL`, `enter_dependent_grid`): programmatic dependent launch on sm_90+.
* Distributed shared memory (`dsmem`): cluster-wide stores of fp32 partials.
* Builder fakes (`CUTE_DTYPES`, `fake_rows`, `fake_scales`, `fake_outputs`,
  `fake_global_scale`, `fake_stream`): symbolic-shape arguments for `cute.compile`.

Their bytes are hashed into every op's cache key (`kernelforge.sources.SHARED_SOURCES`).
"""
from . import convert, dsmem
from .blockscale import (
    FACTOR_TABLE,
    BlockQuantizer,
    byte_views,
    chunk_offset,
    scale_coords,
    scale_grid,
    scale_offset,
    widen,
)
from .dependent_launch import PDL, enter_dependent_grid
from .fakes import CUTE_DTYPES, fake_global_scale, fake_outputs, fake_rows, fake_scales, fake_stream

__all__ = ["CUTE_DTYPES", "FACTOR_TABLE", "PDL", "BlockQuantizer", "byte_views", "chunk_offset", "convert", "dsmem",
           "enter_dependent_grid", "fake_global_scale", "fake_outputs", "fake_rows", "fake_scales", "fake_stream",
           "scale_coords", "scale_grid", "scale_offset", "widen"]
