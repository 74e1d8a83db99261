"""Device-side conversion helpers shared by every quantization kernel (CuTe-DSL, no torch).

Everything here is bit-exact to NUMERICS.md. Hopper (sm_90) has no E2M1 or UE8M0 convert
instruction, so E2M1 and the power-of-two scales are computed with integer/FMA tricks that
are also valid (and identical) on sm_100. Each helper is one small inline-PTX or integer
expression so the arithmetic stays visible and the compiler cannot re-associate it.
"""
from __future__ import annotations

from cutlass import Float32, Int32, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

ABS_MASK = 0x7FFFFFFF
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
def abs_max_u16x2(acc: Uint32, w: Uint32, *, loc=None, ip=None) -> Uint32:
    """Per 16-bit half: max(acc, w with its sign bit cleared) (|x| of two bf16/fp16 values)."""
    return Uint32(
        _asm(T.i32(), [_u32(acc, loc, ip), _u32(w, loc, ip)],
             "{ .reg .b32 t; and.b32 t, $2, 0x7FFF7FFF; max.u16x2 $0, $1, t; }", "=r,r,r", loc, ip)
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


@dsl_user_op
def e2m1_code(y: Float32, *, loc=None, ip=None) -> Uint32:
    """E2M1 code (sign<<3 | magnitude index) of fp32 y: RNE, satfinite, sign kept on zero.

    a = min(|y|, 6) is rounded onto the E2M1 grid by one FMA: with e = max(floor(log2 a), 0)
    the grid step is 2^(e-1), and a * 2^-21 + M, where M = 2^(e+1) + 2e ulps, lands on
    M + round_even(a / 2^(e-1)) ulps. The low three bits of that sum are exactly the
    magnitude index (2e + rounded quotient <= 7), so no table and no compares are needed.
    """
    return Uint32(
        _asm(
            T.i32(),
            [_f32(y, loc, ip)],
            "{ .reg .f32 a, m, r; .reg .b32 ab, e, mb, rb, sb;\n"
            "abs.f32 a, $1;\n"
            "min.f32 a, a, 0f40C00000;\n"  # satfinite at 6.0
            "mov.b32 ab, a;\n"
            "shr.u32 e, ab, 23;\n"
            "max.u32 e, e, 127;\n"
            "sub.u32 e, e, 127;\n"  # e = max(floor(log2 a), 0) in {0, 1, 2}
            "mad.lo.u32 mb, e, 8388610, 1073741824;\n"  # bits of 2^(e+1) plus 2e ulps
            "mov.b32 m, mb;\n"
            "fma.rn.f32 r, a, 0f35000000, m;\n"  # a * 2^-21 + M, one rounding
            "mov.b32 rb, r;\n"
            "and.b32 rb, rb, 7;\n"
            "mov.b32 sb, $1;\n"
            "shr.u32 sb, sb, 28;\n"
            "and.b32 sb, sb, 8;\n"
            "or.b32 $0, rb, sb; }",
            "=r,f",
            loc,
            ip,
        )
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
