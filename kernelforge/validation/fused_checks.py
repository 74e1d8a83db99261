"""Comparison of fused RMSNorm+quantize outputs with the unfused reference (docs/numerics.md tolerance).

docs/numerics.md allows the fused path to differ from the unfused composition (reference rmsnorm in
fp32, cast to dtype, reference quantize) in at most 0.1% of element codes and of scale bytes,
each difference an immediate neighbour. A block whose scale byte moved re-scales all of its
elements, so element codes are compared in blocks whose scale bytes agree.
"""
from __future__ import annotations

import torch

from kernelforge.families.rmsnorm_quantize.reference import add_rmsnorm_ref, rmsnorm_ref
from kernelforge.formats import FORMATS
from kernelforge.testing.references import from_swizzled, quantize_ref, unpack_fp4

TOLERANCE = 1e-3  # fraction of codes / scale bytes allowed to differ (each by one step)


def _ordinal(codes: torch.Tensor, sign_bit: int) -> torch.Tensor:
    """Sign-magnitude codes -> integers ordered like the values (+0 and -0 both 0)."""
    c = codes.to(torch.int32)
    mag = c & (sign_bit - 1)
    return torch.where((c & sign_bit) != 0, -mag, mag)


def _element_ordinals(data: torch.Tensor, fmt: str, m: int) -> torch.Tensor:
    f = FORMATS[fmt]
    d = data.view(torch.uint8).reshape(m, -1)
    if f.element == "e4m3":
        return _ordinal(d, 0x80)
    return _ordinal(unpack_fp4(d), 0x8)


class Tally:
    """Differing / compared counts over a whole test (the 0.1% budget is for the aggregate)."""

    def __init__(self) -> None:
        self.scales = [0, 0]
        self.codes = [0, 0]

    def check(self) -> None:
        for name, (bad, total) in (("scale bytes", self.scales), ("element codes", self.codes)):
            assert total > 0, f"no {name} were compared"
            assert bad <= TOLERANCE * total, f"{bad} of {total} {name} differ from the unfused reference"


def compare_fused(data, scale, ref_data, ref_scale, fmt: str, layout: str, m: int, h: int,
                  finite_rows: torch.Tensor, what: str, tally: Tally) -> None:
    """Every difference is one step, padding is zero; counts go to `tally`.

    Element bytes of NaN/Inf blocks are unspecified (docs/numerics.md) and not compared.
    """
    f = FORMATS[fmt]
    kb = h // f.block
    got_s = scale.view(torch.uint8).reshape(ref_scale.shape)
    if layout == "swizzled":
        pad = torch.ones_like(ref_scale, dtype=torch.bool)
        lin_idx = from_swizzled(torch.arange(ref_scale.numel(), device=ref_scale.device).reshape(ref_scale.shape), m, kb)
        pad.view(-1)[lin_idx.reshape(-1)] = False
        assert (got_s[pad] == 0).all(), f"{what}: swizzle padding bytes are not zero"
        got_s = from_swizzled(got_s, m, kb)
        ref_s = from_swizzled(ref_scale, m, kb)
    else:
        ref_s = ref_scale
    s_diff = got_s.to(torch.int32) - ref_s.to(torch.int32)
    tally.scales[0] += int((s_diff != 0).sum())
    tally.scales[1] += s_diff.numel()
    if s_diff.numel():
        assert int(s_diff.abs().max()) <= 1, f"{what}: a scale byte differs by more than one step"
    got_e = _element_ordinals(data, fmt, m).reshape(m, kb, f.block)
    ref_e = _element_ordinals(ref_data, fmt, m).reshape(m, kb, f.block)
    nan_byte = f.nan_scale_byte
    same_block = (s_diff == 0) & (ref_s != nan_byte) & finite_rows.reshape(m, 1)
    e_diff = (got_e - ref_e)[same_block]
    tally.codes[0] += int((e_diff != 0).sum())
    tally.codes[1] += e_diff.numel()
    if e_diff.numel():
        assert int(e_diff.abs().max()) <= 1, f"{what}: an element code differs by more than one step"


def reference(x, residual, weight, fmt: str, mode: str, layout: str, g, eps: float):
    """(h or None, ref data, ref scale) of the unfused composition, computed where x lives."""
    h = None
    if residual is None:
        y = rmsnorm_ref(x, weight, eps)
    else:
        h, y = add_rmsnorm_ref(x, residual, weight, eps)
    rd, rs = quantize_ref(y, fmt, layout=layout, scale_mode=mode if mode != "none" else "floor",
                          global_scale=g)
    return h, rd, rs
