"""Independent pure-torch reference of docs/numerics.md's block-scaled formats: the test oracle every
quantizing family's reference builds on (public, through `kernelforge.testing`); each family's
own reference is its folder's reference.py.

Written from the numerics contract alone. All arithmetic is fp32 on the input's device, every
rounding is explicit, and no float8 cast of torch is trusted for a result: encoders work on
fp32 bit patterns and round with `torch.round` (round half to even).

Choices where docs/numerics.md leaves freedom (documented once, here):
* NaN encodes to E4M3 0x7F whatever its sign bit (the canonical NaN
  of PTX cvt); +-Inf saturates to +-448. E2M1 has no NaN: NaN encodes to 0x7, +-Inf to +-6.
* Elements of a block holding NaN/Inf are unspecified by the contract; here they are made
  deterministic by scaling the block with NaN, so every element byte is the NaN code
  (0x7F for MXFP8, nibble 0x7 for MXFP4/NVFP4).
* `x * enc` with enc == 0 gives -0.0 for negative x, so such NVFP4 elements encode to 0x8.

NVFP4 with a global scale g that is NaN, +-0, negative or +-Inf (not rejected: the kernels read
g on the device) follows the formulas in IEEE fp32 exactly as the kernels evaluate them:
`sf == 0` compares values (a -0 scale, byte 0x80, counts as zero) and `min(., FLT_MAX)` ignores
a NaN operand (PTX min.f32), so the element factor is always in [0, FLT_MAX]; see
`nvfp4_element_factor` and docs/numerics.md (NVFP4 section).
"""
from __future__ import annotations

import math

import torch

from kernelforge.formats import SWIZZLE_COLS, SWIZZLE_ROWS, Format, get_format, round_up
from kernelforge.ops.calibration import FLT_MAX, _f32, global_scale_of_amax

__all__ = [
    "e4m3_encode", "e4m3_decode", "e2m1_encode", "e2m1_decode", "pack_fp4", "unpack_fp4",
    "exp2_fp32", "ue8m0_scale", "ue8m0_decode", "swizzle_offset", "to_swizzled",
    "from_swizzled", "quantize_ref", "dequantize_ref", "nvfp4_global_scale_ref", "nvfp4_element_factor",
    "global_scale_of_amax",
]

_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _exp_field(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(biased exponent, mantissa) of an fp32 tensor, as int32 tensors."""
    bits = v.contiguous().view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def exp2_fp32(e: torch.Tensor) -> torch.Tensor:
    """Exact fp32 2^e for integer e in [-149, 127], built from bits (subnormals included)."""
    e = e.to(torch.int32)
    normal = ((e + 127).clamp(min=1) << 23)
    sub = torch.ones_like(e) << (e + 149).clamp(0, 22)
    return torch.where(e >= -126, normal, sub).view(torch.float32)


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2(a)) for finite fp32 a > 0, exactly from the bits (subnormals too)."""
    exp, man = _exp_field(a)
    # A subnormal's mantissa (< 2^23) converts to fp32 exactly; its exponent is its bit length.
    sub = _exp_field(man.to(torch.float32))[0] - 127 - 149
    return torch.where(exp > 0, exp - 127, sub)


_EBITS = {3: 4, 1: 2}  # exponent bits by mantissa bits: E4M3, E2M1


def _encode_minifloat(v: torch.Tensor, mbits: int, emin: int, maxv: float, nan_code: int) -> torch.Tensor:
    """uint8 code (sign << 7-or-3 | magnitude code) of RNE-satfinite rounding of fp32 v.

    For a minifloat with m mantissa bits and minimum normal exponent emin, the magnitude code
    of a grid value is linear in (exponent, mantissa): code = (e - emin) * 2^m + n with
    n = |v| / 2^(e-m) in [2^m, 2^(m+1)] (subnormals: e = emin, n < 2^m). Rounding n to the
    nearest even integer is therefore round-to-nearest, ties to even code, and a carry to
    n = 2^(m+1) is exactly the next binade's first code.
    """
    v = v.to(torch.float32).contiguous()
    a = v.abs().clamp_(max=maxv)  # satfinite: everything >= maxv rounds to maxv; NaN stays
    # floor(log2 a) from the exponent field; fp32 subnormals and 0 fall below emin anyway.
    e = ((a.view(torch.int32) >> 23) - 127).clamp_(emin, 127)
    step = ((mbits + 127 - e) << 23).view(torch.float32)  # exact 2^(m-e), a normal number
    n = torch.round(a.mul_(step))  # exact power-of-two scaling into [0, 2^(m+1)], then RNE
    code = ((e - emin) << mbits).add_(n.to(torch.int32))
    code |= (v.view(torch.int32) < 0).to(torch.int32) << (mbits + _EBITS[mbits])
    return torch.where(torch.isnan(v), nan_code, code).to(torch.uint8)


def e4m3_encode(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> uint8 E4M3 codes: RNE, satfinite to +-448, -0 kept, NaN -> 0x7F."""
    return _encode_minifloat(v, 3, -6, 448.0, 0x7F)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> uint8 E2M1 codes 0..15 (sign<<3 | index): RNE, satfinite +-6, -0 -> 0x8, NaN -> 0x7."""
    return _encode_minifloat(v, 1, 0, 6.0, 0x7)


def _e4m3_table(device: torch.device) -> torch.Tensor:
    c = torch.arange(256, dtype=torch.int32, device=device)
    exp, man = (c >> 3) & 0xF, c & 7
    mag = torch.where(exp > 0, (8 + man) * exp2_fp32(exp - 10), man * exp2_fp32(torch.full_like(c, -9)))
    mag = torch.where((c & 0x7F) == 0x7F, torch.full_like(mag, float("nan")), mag)
    return torch.where(c >= 128, -mag, mag)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E4M3 codes -> fp32 values (0x7F/0xFF -> NaN)."""
    return _e4m3_table(codes.device)[codes.long()]


_E2M1_MAGS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E2M1 codes (0..15) -> fp32 values."""
    mags = torch.tensor(_E2M1_MAGS, dtype=torch.float32, device=codes.device)
    table = torch.cat([mags, -mags])
    return table[(codes & 0xF).long()]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] -> bytes [..., K/2]: element 2i low nibble, 2i+1 high nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4: K={codes.shape[-1]} must be even")
    c = codes.to(torch.uint8) & 0xF
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 bytes [..., K/2] -> codes [..., K] (inverse of pack_fp4)."""
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


def ue8m0_scale(amax: torch.Tensor, fmt: Format | str, mode: str) -> torch.Tensor:
    """UE8M0 scale bytes of block amaxes (fp32, >= 0) for an MX format; NaN/Inf -> 0xFF."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    amax = amax.to(torch.float32)
    finite = torch.isfinite(amax)
    a = torch.where(finite, amax, torch.zeros_like(amax))
    if mode == "floor":
        pos = a > 0
        e = _floor_log2(torch.where(pos, a, torch.ones_like(a))) - fmt.emax
        s = torch.where(pos, e.clamp(-127, 127) + 127, torch.zeros_like(e))
    elif mode == "rceil":
        t = a * _f32(1.0 / fmt.maxv, a.device)  # one correctly rounded fp32 product
        exp, man = _exp_field(t)
        s = torch.where(exp > 0, exp + (man != 0).to(torch.int32),
                        (man > (1 << 22)).to(torch.int32))  # subnormal: up only above 2^-127
        s = s.clamp(max=254)
    else:
        raise ValueError(f"scale_mode: expected 'floor' or 'rceil' for {fmt.name}, got {mode!r}")
    return torch.where(finite, s, torch.full_like(s, 0xFF)).to(torch.uint8)


def ue8m0_decode(s: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes -> fp32 2^(s-127) (0 -> 2^-127, 0xFF -> NaN)."""
    s = s.to(torch.int32)
    v = exp2_fp32((s - 127).clamp(max=127))
    return torch.where(s == 0xFF, torch.full_like(v, float("nan")), v)


def swizzle_offset(m, k, np_cols: int):
    """Flat byte offset of (row m, scale column k) in the 128x4 swizzled layout (ints or tensors)."""
    return ((m // 128) * np_cols * 128 + (k // 4) * 512 + (m % 32) * 16
            + ((m % 128) // 32) * 4 + k % 4)


def _swizzle_index(m: int, c: int, device: torch.device) -> tuple[torch.Tensor, int, int]:
    mp, np_ = round_up(m, SWIZZLE_ROWS), round_up(c, SWIZZLE_COLS)
    rows = torch.arange(m, device=device).view(-1, 1)
    cols = torch.arange(c, device=device).view(1, -1)
    return swizzle_offset(rows, cols, np_), mp, np_


def to_swizzled(scale_linear: torch.Tensor) -> torch.Tensor:
    """uint8 scales [M, C] -> [roundup(M,128), roundup(C,4)] in the swizzled layout, padding 0."""
    m, c = scale_linear.shape
    idx, mp, np_ = _swizzle_index(m, c, scale_linear.device)
    out = torch.zeros(mp * np_, dtype=torch.uint8, device=scale_linear.device)
    out[idx.reshape(-1)] = scale_linear.reshape(-1).to(torch.uint8)
    return out.view(mp, np_)


def from_swizzled(sw: torch.Tensor, m: int, c: int) -> torch.Tensor:
    """Swizzled scales [Mp, Np] -> linear [m, c] (inverse of to_swizzled)."""
    idx, mp, np_ = _swizzle_index(m, c, sw.device)
    if tuple(sw.shape) != (mp, np_):
        raise ValueError(f"from_swizzled: expected shape {(mp, np_)}, got {tuple(sw.shape)}")
    return sw.reshape(-1)[idx.reshape(-1)].view(m, c)


def _global_scale(g: torch.Tensor | float | None, device: torch.device) -> torch.Tensor:
    if g is None:
        return _f32(1.0, device)
    if not isinstance(g, torch.Tensor):
        return _f32(float(g), device)
    return g.to(device=device, dtype=torch.float32).reshape(())


def quantize_ref(
    x: torch.Tensor,
    format: str,
    *,
    layout: str = "linear",
    scale_mode: str = "floor",
    global_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise block quantization of x [..., K] per docs/numerics.md -> (data uint8, scale uint8).

    data: [M, K] E4M3 bytes (mxfp8) or [M, K/2] packed E2M1 (mxfp4, nvfp4).
    scale: [M, K/B] (linear) or [roundup(M,128), roundup(K/B,4)] (swizzled, padding 0).
    """
    fmt = get_format(format)
    if layout not in ("linear", "swizzled"):
        raise ValueError(f"layout: expected 'linear' or 'swizzled', got {layout!r}")
    if x.dtype not in _INPUT_DTYPES:
        raise ValueError(f"x: expected bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x: expected at least one dimension")
    k, b = x.shape[-1], fmt.block
    if k % b:
        raise ValueError(f"{fmt.name}: K={k} is not a multiple of the block size B={b}")
    xf = x.reshape(math.prod(x.shape[:-1]), k).to(torch.float32)
    m, dev = xf.shape[0], xf.device
    blocks = xf.view(m, k // b, b)
    nonfinite = (~torch.isfinite(blocks)).any(-1)
    amax = blocks.abs().amax(-1)  # NaN propagates; NaN/Inf blocks are overridden below

    if fmt.has_global_scale:
        g = _global_scale(global_scale, dev)
        sf = e4m3_encode(amax * (g * _f32(1.0 / 6.0, dev)))
        enc = nvfp4_element_factor(e4m3_decode(sf), g)
        scale = torch.where(nonfinite, torch.full_like(sf, fmt.nan_scale_byte), sf)
        factor = torch.where(nonfinite, torch.full_like(enc, float("nan")), enc)
    else:
        if scale_mode not in fmt.scale_modes:
            raise ValueError(f"scale_mode: expected one of {list(fmt.scale_modes)}, got {scale_mode!r}")
        scale = ue8m0_scale(amax, fmt, scale_mode)
        s = scale.to(torch.int32)
        factor = exp2_fp32((127 - s).clamp(min=-127))
        factor = torch.where(s == 0xFF, torch.full_like(factor, float("nan")), factor)

    y = (blocks * factor.unsqueeze(-1)).view(m, k)
    data = e4m3_encode(y) if fmt.element == "e4m3" else pack_fp4(e2m1_encode(y))
    if layout == "swizzled":
        scale = to_swizzled(scale)
    return data, scale


def nvfp4_element_factor(sf: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """NVFP4's element factor of decoded block scales `sf` (fp32) under global scale g:
    0 where sf == 0 (either sign), else `min(1 / (sf * (1/g)), FLT_MAX)` with a NaN operand of
    the min ignored (a NaN scale, from a NaN g or 0 * Inf, gives FLT_MAX), as in the kernels."""
    enc = torch.fmin(1.0 / (sf * (1.0 / g)), _f32(FLT_MAX, sf.device))
    return torch.where(sf == 0, torch.zeros_like(enc), enc)


def dequantize_ref(
    data: torch.Tensor,
    scale: torch.Tensor,
    format: str,
    *,
    m: int,
    k: int,
    layout: str = "linear",
    global_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """(data, scale) from quantize_ref -> fp32 [m, k]: MX elem*2^(s-127), NVFP4 e2m1*fp32(sf)/g."""
    fmt = get_format(format)
    if layout == "swizzled":
        scale = from_swizzled(scale, m, k // fmt.block)
    data = data.reshape(m, fmt.data_cols(k))
    q = e4m3_decode(data) if fmt.element == "e4m3" else e2m1_decode(unpack_fp4(data))
    q = q.view(m, k // fmt.block, fmt.block)
    if fmt.has_global_scale:
        g = _global_scale(global_scale, data.device)
        out = q * e4m3_decode(scale).unsqueeze(-1) / g
    else:
        out = q * ue8m0_decode(scale).unsqueeze(-1)
    return out.view(m, k)


def nvfp4_global_scale_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 [1] calibration g = global_scale_of_amax(amax(|x|)) (empty x: 1.0)."""
    amax = x.abs().amax().to(torch.float32) if x.numel() else _f32(0.0, x.device)
    return global_scale_of_amax(amax).reshape(1)
