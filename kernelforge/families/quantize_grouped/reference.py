"""Pure-torch reference of `quantize_grouped` (docs/numerics.md): every expert / group quantized
as `kernelforge.testing.quantize_ref` quantizes a plain input."""
from __future__ import annotations

import torch

from kernelforge.formats import SWIZZLE_COLS, SWIZZLE_ROWS, get_format, round_up, scale_shape
from kernelforge.testing.references import quantize_ref


def _global_scale_per_group(g: torch.Tensor | None, groups: int) -> list[torch.Tensor | None]:
    """One NVFP4 global scale per group from None, a [1] tensor (shared) or a [groups] tensor."""
    if g is None or g.numel() == 1:
        return [g] * groups
    if g.shape != (groups,):
        raise ValueError(f"global_scale: expected shape [1] or [{groups}], got {list(g.shape)}")
    return [g[i:i + 1] for i in range(groups)]


def quantize_experts_ref(
    w: torch.Tensor,
    format: str,
    *,
    layout: str = "swizzled",
    scale_mode: str = "floor",
    global_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_ref of every expert of w [E, N, K] -> (data uint8, scale uint8), stacked.

    data: [E, N, K*bits/8]; scale: [E, N, K/B] (linear) or [E, roundup(N,128), roundup(K/B,4)]
    (swizzled: each expert's slab in the 128x4 layout, padding 0). global_scale: None, [1]
    (every expert) or [E] (one per expert).
    """
    fmt = get_format(format)
    if w.dim() != 3:
        raise ValueError(f"w: expected a 3-D tensor [E, N, K], got shape {list(w.shape)}")
    e, n, k = w.shape
    parts = [quantize_ref(w[i], format, layout=layout, scale_mode=scale_mode, global_scale=g)
             for i, g in enumerate(_global_scale_per_group(global_scale, e))]
    if not parts:
        return (torch.empty((0, n, fmt.data_cols(k)), dtype=torch.uint8, device=w.device),
                torch.empty((0, *scale_shape(fmt, n, k, layout)), dtype=torch.uint8, device=w.device))
    return torch.stack([d for d, _ in parts]), torch.stack([s for _, s in parts])


def quantize_grouped_ref(
    x: torch.Tensor,
    group_offsets: torch.Tensor,
    format: str,
    *,
    scale_mode: str = "floor",
    global_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rowwise quantization of the row groups of x [T, K] -> (data uint8, scale uint8, scale_offsets int32).

    Group g is rows [offsets[g-1], offsets[g]) (0 before the first). data: [T, K*bits/8], group
    g's rows quantized with its global scale (None, [1] shared, or [G]). scale: [R, roundup(K/B,4)]
    with R = 128 * floor((T + 127*G) / 128); group g's swizzled scales (its rows padded to a
    multiple of 128) start at row scale_offsets[g] = sum over h < g of roundup(size_h, 128);
    every other byte is 0.
    """
    fmt = get_format(format)
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor [T, K], got shape {list(x.shape)}")
    t, k = x.shape
    ends = [int(v) for v in group_offsets.tolist()]
    if not ends or any(b < a for a, b in zip([0] + ends, ends)) or ends[-1] != t:
        raise ValueError(f"group_offsets: expected non-decreasing values >= 0 ending at T = {t}, got {ends}")
    rows = (t + (SWIZZLE_ROWS - 1) * len(ends)) // SWIZZLE_ROWS * SWIZZLE_ROWS
    data = torch.empty((t, fmt.data_cols(k)), dtype=torch.uint8, device=x.device)
    scale = torch.zeros((rows, round_up(k // fmt.block, SWIZZLE_COLS)), dtype=torch.uint8, device=x.device)
    starts = []
    begin = start = 0
    for end, g in zip(ends, _global_scale_per_group(global_scale, len(ends))):
        d, s = quantize_ref(x[begin:end], format, layout="swizzled", scale_mode=scale_mode, global_scale=g)
        data[begin:end] = d
        scale[start:start + s.shape[0]] = s
        starts.append(start)
        begin, start = end, start + s.shape[0]
    return data, scale, torch.tensor(starts, dtype=torch.int32, device=x.device)
