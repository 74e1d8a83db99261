"""Device-side conversion helpers shared by every quantization kernel (CuTe-DSL, no torch).

Everything here is bit-exact to docs/numerics.md. Hopper (sm_90) has no E2M1 or UE8M0 convert
instruction, so E2M1 and the power-of-two scales are computed with integer/FMA tricks that
are also valid (and identical) on sm_100. Each helper is one small inline-PTX or integer
expression so the arithmetic stays visible and the compiler cannot re-associate it.
"""
from __future__ import annotations

from cutlass import Float32, Int32, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

ABS_MASK = 0x7FFFFFFF
HALF2_ABS_MASK = 0x7FFF7FFF  # |x| of both halves of a bf16x2/f16x2 word
INF_BITS = 0x7F800000
SIGN_BIT = 0x80000000


def _asm(res_type, operands, text: str, constraints: str, loc=None, ip=None):
    return llvm.inline_asm(
        res_type,
        operands,
        text,
        constraints,
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )


def _u32(v, loc=None, ip=None):
    return Uint32(v).ir_value(loc=loc, ip=ip)


def _f32(v, loc=None, ip=None):
    return Float32(v).ir_value(loc=loc, ip=ip)


@dsl_user_op
def f32_bits(x: Float32, *, loc=None, ip=None) -> Uint32:
    """The IEEE bit pattern of an fp32 value."""
    return Uint32(_asm(T.i32(), [_f32(x, loc, ip)], "mov.b32 $0, $1;", "=r,f", loc, ip))


@dsl_user_op
def bits_f32(b: Uint32, *, loc=None, ip=None) -> Float32:
    """The fp32 value of an IEEE bit pattern."""
    return Float32(_asm(T.f32(), [_u32(b, loc, ip)], "mov.b32 $0, $1;", "=f,r", loc, ip))


@dsl_user_op
def umax(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)], "max.u32 $0, $1, $2;", "=r,r,r", loc, ip)
    )


@dsl_user_op
def max_u16x2(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    """Per 16-bit half unsigned max (on |x| bit patterns of bf16/fp16: NaN-aware magnitude max)."""
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)], "max.u16x2 $0, $1, $2;", "=r,r,r", loc, ip)
    )


@dsl_user_op
def max_abs_half2(a: Uint32, b: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Uint32:
    """Per half max(|a|, |b|) of bf16x2/f16x2 words, NaN if either is NaN; the sign bits are junk
    (xor of the operands' signs). One instruction where an abs mask and an integer max take 1.5."""
    sfx = "bf16x2" if is_bf16 else "f16x2"
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)], f"max.NaN.xorsign.abs.{sfx} $0, $1, $2;",
             "=r,r,r", loc, ip)
    )


@dsl_user_op
def half2_amax_bits(acc: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Uint32:
    """fp32 |x| bits of the larger magnitude of the two halves of a `max_abs_half2` result."""
    sfx = "bf16x2" if is_bf16 else "f16x2"
    if is_bf16:
        tail = "and.b32 $0, m, 0x7FFF0000; }"
    else:
        tail = ("{ .reg .b16 l, h; .reg .f32 f; mov.b32 {l, h}, m; cvt.f32.f16 f, h; mov.b32 $0, f; }\n"
                "and.b32 $0, $0, 0x7FFFFFFF; }")
    return Uint32(
        _asm(T.i32(), [_u32(acc, loc, ip)],
             "{ .reg .b32 s, m; prmt.b32 s, $1, $1, 0x1032;\n"
             f"max.NaN.xorsign.abs.{sfx} m, $1, s;\n" + tail, "=r,r", loc, ip)
    )


@dsl_user_op
def half_amax_bits(acc: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Uint32:
    """fp32 bits of the larger 16-bit half of acc (bf16 or fp16 magnitude bits; NaN/Inf kept)."""
    if is_bf16:
        text = "{ .reg .b32 lo, hi; and.b32 lo, $1, 0xFFFF; shr.u32 hi, $1, 16; max.u32 lo, lo, hi; shl.b32 $0, lo, 16; }"
    else:
        text = ("{ .reg .b32 lo, hi; .reg .b16 h; .reg .f32 f; and.b32 lo, $1, 0xFFFF; shr.u32 hi, $1, 16;\n"
                "max.u32 lo, lo, hi; cvt.u16.u32 h, lo; cvt.f32.f16 f, h; mov.b32 $0, f; }")
    return Uint32(_asm(T.i32(), [_u32(acc, loc, ip)], text, "=r,r", loc, ip))


@dsl_user_op
def mul_rn(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """a * b, correctly rounded, never contracted into an FMA, subnormals kept."""
    return Float32(
        _asm(T.f32(), [_f32(a, loc, ip), _f32(b, loc, ip)], "mul.rn.f32 $0, $1, $2;", "=f,f,f", loc, ip)
    )


@dsl_user_op
def rcp_rn(a: Float32, *, loc=None, ip=None) -> Float32:
    """1 / a, correctly rounded (IEEE), no approximation, no flush to zero."""
    return Float32(_asm(T.f32(), [_f32(a, loc, ip)], "rcp.rn.f32 $0, $1;", "=f,f", loc, ip))


@dsl_user_op
def e4m3x4_pack(a: Float32, b: Float32, c: Float32, d: Float32, *, loc=None, ip=None) -> Uint32:
    """Four fp32 values -> four E4M3 bytes (RNE, satfinite), `a` in the lowest byte."""
    # cvt.e4m3x2 puts its first source operand in the upper byte of the 16-bit result.
    return Uint32(
        _asm(
            T.i32(),
            [_f32(a, loc, ip), _f32(b, loc, ip), _f32(c, loc, ip), _f32(d, loc, ip)],
            "{ .reg .b16 lo, hi;\n"
            "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
            "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
            "mov.b32 $0, {lo, hi}; }",
            "=r,f,f,f,f",
            loc,
            ip,
        )
    )


@dsl_user_op
def e4m3_byte(x: Float32, *, loc=None, ip=None) -> Uint32:
    """The E4M3 byte of x (RNE, satfinite), in the low 8 bits."""
    return Uint32(
        _asm(
            T.i32(),
            [_f32(x, loc, ip)],
            "{ .reg .b16 q; .reg .f32 z; mov.f32 z, 0f00000000;\n"
            "cvt.rn.satfinite.e4m3x2.f32 q, z, $1;\n"
            "cvt.u32.u16 $0, q; }",
            "=r,f",
            loc,
            ip,
        )
    )


@dsl_user_op
def e4m3_decode(b: Uint32, *, loc=None, ip=None) -> Float32:
    """fp32 value of the E4M3 byte in the low 8 bits of b (exact)."""
    return Float32(
        _asm(
            T.f32(),
            [_u32(b, loc, ip)],
            "{ .reg .b16 q, lo, hi; .reg .b32 h2;\n"
            "cvt.u16.u32 q, $1;\n"
            "cvt.rn.f16x2.e4m3x2 h2, q;\n"
            "mov.b32 {lo, hi}, h2;\n"
            "cvt.f32.f16 $0, lo; }",
            "=f,r",
            loc,
            ip,
        )
    )


@dsl_user_op
def sqrt_rn(a: Float32, *, loc=None, ip=None) -> Float32:
    """sqrt(a), correctly rounded (IEEE), no flush to zero."""
    return Float32(_asm(T.f32(), [_f32(a, loc, ip)], "sqrt.rn.f32 $0, $1;", "=f,f", loc, ip))


@dsl_user_op
def div_rn(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """a / b, correctly rounded (IEEE), no flush to zero."""
    return Float32(
        _asm(T.f32(), [_f32(a, loc, ip), _f32(b, loc, ip)], "div.rn.f32 $0, $1, $2;", "=f,f,f", loc, ip)
    )


# E2M1 rounding by one FMA. With a = min(|y|, 6) and e = max(floor(log2 a), 0), the E2M1 grid
# step is 2^(e-1). Adding a * 2^(2-m) to M = 2^(e+1) + 2e ulps (m = mantissa bits of the format
# the FMA runs in) lands on M + round_even(a / 2^(e-1)) ulps: the low three bits of the sum are
# the magnitude index 2e + q <= 7, with no table and no compares. The sign is merged later.
E2M1_F32_M0 = (0x40000000 - 127 * 8388610) % (1 << 32)  # M = E * (2^23 + 2) + this, E = biased exp


_E2M1_ROUND = (  # a (>= 0, <= 7 when rounded) -> index in bits 0-2 of $0
    "max.f32 t, a, 0f3F800000;\n"  # exponent of t is 127 + e
    "mov.b32 e, t;\n"
    "shr.u32 e, e, 23;\n"
    f"mad.lo.u32 mb, e, 8388610, {E2M1_F32_M0};\n"  # bits of 2^(e+1) plus 2e ulps
    "mov.b32 m, mb;\n"
    "fma.rn.f32 r, a, 0f35000000, m;\n"  # a * 2^-21 + M, one rounding
    "mov.b32 $0, r; }"
)


@dsl_user_op
def e2m1_index(y: Float32, *, loc=None, ip=None) -> Uint32:
    """E2M1 magnitude index of fp32 y (RNE, satfinite) in bits 0-2; bits 3-22 are zero."""
    return Uint32(
        _asm(
            T.i32(),
            [_f32(y, loc, ip)],
            "{ .reg .f32 a, t, m, r; .reg .b32 e, mb;\n"
            "abs.f32 a, $1;\n"
            "min.f32 a, a, 0f40C00000;\n"  # satfinite at 6.0
            + _E2M1_ROUND,
            "=r,f",
            loc,
            ip,
        )
    )


@dsl_user_op
def e2m1_index_below7(a: Float32, *, loc=None, ip=None) -> Uint32:
    """`e2m1_index` of a value 0 <= a < 7, without the saturation: a in (6, 7) rounds to the
    top index 7 by itself (its grid step is 2), so blocks known to stay below 7 skip the clamp."""
    return Uint32(
        _asm(T.i32(), [_f32(a, loc, ip)], "{ .reg .f32 a, t, m, r; .reg .b32 e, mb;\nmov.f32 a, $1;\n" + _E2M1_ROUND,
             "=r,f", loc, ip)
    )


@dsl_user_op
def mul_abs_rn(x: Float32, f: Float32, *, loc=None, ip=None) -> Float32:
    """|x| * f, correctly rounded, never contracted (one FMUL with an abs operand)."""
    return Float32(
        _asm(T.f32(), [_f32(x, loc, ip), _f32(f, loc, ip)],
             "{ .reg .f32 a; abs.f32 a, $1; mul.rn.f32 $0, a, $2; }", "=f,f,f", loc, ip)
    )


@dsl_user_op
def e2m1_index_x2(s: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Uint32:
    """E2M1 magnitude indices of a bf16x2/f16x2 pair of values >= 0 (or NaN), in bits 0-2 / 16-18.

    The same FMA rounding as `e2m1_index`, two at a time on the packed halves; M comes from
    t = max(min(s, 6), 1) as E + (E >> (m - 1)) + C per half, E = t's exponent field.
    Exact because the caller's values are exactly representable in the 16-bit format.
    """
    if is_bf16:  # m = 7, bias 127: C = 0x80 - 254 per half; the low half always carries one
        six, one, step, emask, shift, c, sfx = "0x40C040C0", "0x3F803F80", "0x3D003D00", "0x7F807F80", 6, "0xFF81FF82", "bf16x2"
    else:  # m = 10, bias 15: C = 0x400 - 30 per half, no carry
        six, one, step, emask, shift, c, sfx = "0x46004600", "0x3C003C00", "0x1C001C00", "0x7C007C00", 9, "0x03E203E2", "f16x2"
    return Uint32(
        _asm(
            T.i32(),
            [_u32(s, loc, ip)],
            "{ .reg .b32 a, t, e, m, k6, k1, ks;\n"  # packed ops take no immediates
            f"mov.b32 k6, {six};\n"
            f"mov.b32 k1, {one};\n"
            f"mov.b32 ks, {step};\n"
            f"min.{sfx} a, $1, k6;\n"
            f"max.{sfx} t, a, k1;\n"
            f"and.b32 e, t, {emask};\n"
            f"shr.u32 m, e, {shift};\n"
            "add.u32 m, m, e;\n"
            f"add.u32 m, m, {c};\n"
            f"fma.rn.{sfx} $0, a, ks, m; }}",
            "=r,r",
            loc,
            ip,
        )
    )


@dsl_user_op
def prmt(a: Uint32, b: Uint32, sel: int, *, loc=None, ip=None) -> Uint32:
    """Byte permute: result byte i = byte sel[4i:4i+3] of (b:a); selector bit 3 replicates its sign."""
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)], f"prmt.b32 $0, $1, $2, {sel:#x};", "=r,r,r", loc, ip)
    )


@dsl_user_op
def select_bits(a: Uint32, b: Uint32, mask: int, *, loc=None, ip=None) -> Uint32:
    """Bits of a where mask is set, bits of b elsewhere (one LOP3)."""
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)],
             f"lop3.b32 $0, $1, $2, {mask:#x}, 0xE4;", "=r,r,r", loc, ip)
    )


@dsl_user_op
def half2_lo(w: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Float32:
    """fp32 value of the low bf16/fp16 half of w (exact)."""
    text = "shl.b32 $0, $1, 16;" if is_bf16 else "{ .reg .b16 l, h; mov.b32 {l, h}, $1; cvt.f32.f16 $0, l; }"
    return Float32(_asm(T.f32(), [_u32(w, loc, ip)], text, "=f,r", loc, ip))


@dsl_user_op
def half2_hi(w: Uint32, is_bf16: bool, *, loc=None, ip=None) -> Float32:
    """fp32 value of the high bf16/fp16 half of w (exact)."""
    text = "and.b32 $0, $1, 0xFFFF0000;" if is_bf16 else "{ .reg .b16 l, h; mov.b32 {l, h}, $1; cvt.f32.f16 $0, h; }"
    return Float32(_asm(T.f32(), [_u32(w, loc, ip)], text, "=f,r", loc, ip))


@dsl_user_op
def pack_half2(lo: Float32, hi: Float32, is_bf16: bool, *, loc=None, ip=None) -> Uint32:
    """Two fp32 values rounded (RNE) to bf16/fp16 and packed, `lo` in the low half."""
    sfx = "bf16x2" if is_bf16 else "f16x2"
    return Uint32(
        _asm(T.i32(), [_f32(lo, loc, ip), _f32(hi, loc, ip)], f"cvt.rn.{sfx}.f32 $0, $2, $1;", "=r,f,f", loc, ip)
    )


@dsl_user_op
def mul_bf16x2(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    """Per-half bf16 product a * b, correctly rounded (exact for a power-of-two b)."""
    return Uint32(
        _asm(T.i32(), [_u32(a, loc, ip), _u32(b, loc, ip)], "mul.rn.bf16x2 $0, $1, $2;", "=r,r,r", loc, ip)
    )


@dsl_user_op
def exp2_int(n: Int32, *, loc=None, ip=None) -> Float32:
    """Exact fp32 2^n for n in [-127, 127] (2^-127 is an fp32 subnormal)."""
    return Float32(
        _asm(
            T.f32(),
            [Int32(n).ir_value(loc=loc, ip=ip)],
            "{ .reg .s32 b; .reg .pred sub;\n"
            "add.s32 b, $1, 127;\n"
            "setp.lt.s32 sub, b, 1;\n"
            "shl.b32 b, b, 23;\n"
            "@sub mov.b32 b, 4194304;\n"  # 0x00400000 = 2^-127
            "mov.b32 $0, b; }",
            "=f,r",
            loc,
            ip,
        )
    )


@dsl_user_op
def ue8m0_floor(amax_bits: Uint32, emax: int, *, loc=None, ip=None) -> Uint32:
    """OCP MX floor scale byte from the fp32 bits of a block's amax (|x| bits, NaN-aware).

    floor(log2(amax)) - emax + 127 is the biased exponent minus emax; fp32 subnormals and
    zero have exponent 0 and clamp to byte 0. NaN/Inf blocks get 0xFF.
    """
    return Uint32(
        _asm(
            T.i32(),
            [_u32(amax_bits, loc, ip)],
            "{ .reg .b32 e; .reg .pred bad;\n"
            f"shr.u32 e, $1, 23;\n"
            f"max.u32 e, e, {emax};\n"
            f"sub.u32 e, e, {emax};\n"
            f"setp.ge.u32 bad, $1, {INF_BITS};\n"
            "selp.b32 $0, 255, e, bad; }",
            "=r,r",
            loc,
            ip,
        )
    )


@dsl_user_op
def ue8m0_rceil(amax_bits: Uint32, inv_maxv: float, *, loc=None, ip=None) -> Uint32:
    """rceil scale byte: UE8M0 of amax * fp32(1/maxv) rounded up to a power of two.

    Biased exponent E plus one when the mantissa is non-zero; an fp32-subnormal value rounds
    up to 2^-126 (byte 1) only when it is above 2^-127. Clamped to 254; NaN/Inf -> 0xFF.
    """
    inv = Float32(inv_maxv)
    return Uint32(
        _asm(
            T.i32(),
            [_u32(amax_bits, loc, ip), _f32(inv, loc, ip)],
            "{ .reg .f32 a, v; .reg .b32 vb, e, mnt, s; .reg .pred nz, sub, bad;\n"
            "mov.b32 a, $1;\n"
            "mul.rn.f32 v, a, $2;\n"
            "mov.b32 vb, v;\n"
            "shr.u32 e, vb, 23;\n"
            "and.b32 mnt, vb, 8388607;\n"
            "setp.ne.u32 nz, mnt, 0;\n"
            "selp.b32 s, 1, 0, nz;\n"
            "add.u32 s, s, e;\n"
            "setp.eq.u32 sub, e, 0;\n"
            "setp.gt.u32 nz, vb, 4194304;\n"
            "@sub selp.b32 s, 1, 0, nz;\n"
            "min.u32 s, s, 254;\n"
            f"setp.ge.u32 bad, $1, {INF_BITS};\n"
            "selp.b32 $0, 255, s, bad; }",
            "=r,r,f",
            loc,
            ip,
        )
    )
