"""`kernelforge.quantize_nvfp4_rht` and `kernelforge.rht_global_scale`: NVFP4 rowwise plus the
random-Hadamard-transformed columnwise output (kernels of the `quantize_columnwise` op)."""
from __future__ import annotations

from typing import Optional

import torch

from kernelforge.families.quantize_columnwise import op as cw
from kernelforge.ops import checks, fast_path
from kernelforge.ops.calibration import nvfp4_global_scale
from kernelforge.ops.torch_op import TorchOp, copy_into

from .op import quantize


def quantize_nvfp4_rht(
    x: torch.Tensor,
    *,
    global_scale_row: Optional[torch.Tensor] = None,
    global_scale_col: Optional[torch.Tensor] = None,
    sign_mask: int = cw.RHT_SIGN_MASK,
    rowwise: bool = True,
    columnwise: bool = True,
    layout: str = "swizzled",
    out: Optional[tuple[torch.Tensor, ...]] = None,
) -> tuple[torch.Tensor, ...]:
    """NVFP4 of x [M, N] (bfloat16) rowwise, and of its random-Hadamard-transformed transpose
    columnwise (docs/numerics.md), from one read of x.

    Returns (data, scale, data_t, scale_t) with both outputs, otherwise the one pair asked for:
    data [M, N/2] and data_t [N, M/2] float4_e2m1fn_x2, scales float8_e4m3fn in `layout`.
    `global_scale_row` / `global_scale_col` are fp32 [1] CUDA tensors (None means 1.0; see
    `rht_global_scale` for the columnwise calibration). `sign_mask` is the 16-bit mask of
    negated rows of each 16-row group. M and N must be multiples of 16. Shapes with M % 64
    or N % 64 non-zero (or unaligned rows) run the prebuilt fallback variant, with the same bytes.
    """
    if torch.compiler.is_compiling():
        if not columnwise:
            return quantize(x, "nvfp4", layout=layout, global_scale=global_scale_row, out=out)
        res = quantize_nvfp4_rht_op.custom(x, global_scale_row, global_scale_col, sign_mask, rowwise, layout)
        return copy_into(out, res if rowwise else res[2:])
    key = fast_path.fast_key("quantize_nvfp4_rht", x, out, (layout, rowwise, sign_mask),
                     (global_scale_row, global_scale_col)) if columnwise and out is not None else None
    if key is not None:
        hit = fast_path.fast_hit(key, x)
        if hit is not None and cw.repeat(hit, x, out):
            return tuple(out)
    fmt, mode, data_dtype, scale_dtype = checks.format_plan("nvfp4", layout, "none")
    cw.check_rht_input(x, sign_mask)
    if not (rowwise or columnwise):
        raise ValueError("rowwise, columnwise: at least one output must be requested")
    if not columnwise:
        if global_scale_col is not None:
            raise ValueError("global_scale_col: only used with columnwise=True")
        return quantize(x, "nvfp4", layout=layout, global_scale=global_scale_row, out=out)
    if not rowwise and global_scale_row is not None:
        raise ValueError("global_scale_row: only used with rowwise=True")
    return cw.run(x, fmt, mode, layout, data_dtype, scale_dtype, rowwise, global_scale_row, global_scale_col, out,
                  transform="rht", sign_mask=sign_mask, key=key)


def rht_global_scale(x: torch.Tensor, sign_mask: int = cw.RHT_SIGN_MASK) -> torch.Tensor:
    """Calibration of the columnwise RHT output: `448 * 6 / amax(|rht(x)|)` as an fp32 [1]
    tensor on x's device, computed on the device without a sync; finite and positive as for
    `nvfp4_global_scale` (amax 0, or an x holding Inf or NaN, gives 1.0)."""
    cw.check_rht_input(x, sign_mask)
    return nvfp4_global_scale(cw.hadamard_columns(x, sign_mask))


def _quantize_nvfp4_rht_custom(x: torch.Tensor, global_scale_row: Optional[torch.Tensor] = None,
                               global_scale_col: Optional[torch.Tensor] = None, sign_mask: int = cw.RHT_SIGN_MASK,
                               rowwise: bool = True,
                               layout: str = "swizzled"
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """NVFP4 rowwise + RHT columnwise (see `kernelforge.quantize_nvfp4_rht`); rowwise pair empty without it."""
    outs = quantize_nvfp4_rht(x, global_scale_row=global_scale_row, global_scale_col=global_scale_col,
                              sign_mask=sign_mask, rowwise=rowwise, columnwise=True, layout=layout)
    return checks.four(x, outs, "nvfp4", layout, "none")


quantize_nvfp4_rht_op = TorchOp(
    "kernelforge::quantize_nvfp4_rht", _quantize_nvfp4_rht_custom,
    schema=f'(Tensor x, Tensor? global_scale_row=None, Tensor? global_scale_col=None, '
           f'SymInt sign_mask={cw.RHT_SIGN_MASK}, bool rowwise=True, str layout="swizzled") '
           '-> (Tensor, Tensor, Tensor, Tensor)',
    fake=lambda x, global_scale_row=None, global_scale_col=None, sign_mask=cw.RHT_SIGN_MASK, rowwise=True,
    layout="swizzled": checks.fake_four(x, "nvfp4", layout, "none", rowwise))
