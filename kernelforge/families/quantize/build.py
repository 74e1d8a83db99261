"""The builder of `quantize`: a variant -> (kernel, fake arguments) in the order of the exported
function (x, data, scale, global_scale, stream); build time only (imports cutlass)."""
from __future__ import annotations

from typing import Any

import cutlass.cute as cute

from kernelforge.formats import get_format
from kernelforge.kernels import fake_outputs, fake_rows, fake_stream

from .kernel import QuantizeConfig, QuantizeKernel


def quantize_args(v: Any) -> tuple[object, list[object]]:
    fmt = get_format(v.format)
    m = cute.sym_int32(symbol="M")
    x, _ = fake_rows(v, fmt, m, contiguous=False)
    kernel = QuantizeKernel(QuantizeConfig(
        fmt=fmt, layout=v.layout, scale_mode=v.scale_mode,
        threads=int(v.threads), units_per_thread=int(v.units_per_thread)))
    return kernel, [x, *fake_outputs(v, fmt, m), fake_stream()]
