"""The builder of `scale_layout`: two (swizzled, linear) scale pairs as int32 words: swizzled
scales flat [Mp * Np / 4], linear [M, Np / 4] with Np / 4 a multiple of 8 and 16-byte aligned
rows (the K-class); a second pair of zero rows stands for none. Build time only."""
from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

from kernelforge.kernels import fake_stream

from .kernel import CTA_WORDS, SECTOR_WORDS, ScaleUnswizzleKernel


def scale_layout_args(v: Any) -> tuple[object, list[object]]:
    pairs = []
    for suffix in ("", "T"):
        src = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int32(divisibility=CTA_WORDS, symbol="S" + suffix),),
                                       assumed_align=16)
        words = cute.sym_int32(divisibility=SECTOR_WORDS, symbol="W" + suffix)
        dst = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int32(symbol="M" + suffix), words),
                                       stride_order=(1, 0), assumed_align=v.kclass.vector_bytes)
        pairs += [src, dst]
    return ScaleUnswizzleKernel(), [*pairs, fake_stream()]
