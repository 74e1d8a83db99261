"""Block-scaled quantization of one register block, and the scale layouts (CuTe-DSL, no torch).

Every kernel that emits MXFP8 / MXFP4 / NVFP4 goes through `BlockQuantizer`: the kernels
differ in how they produce a block of fp32 values (plain load, RMSNorm, ...) and where
they write it, never in the quantization arithmetic, which is bit-exact to NUMERICS.md.
"""
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32

from ..formats import SWIZZLE_COLS, SWIZZLE_ROWS, Format
from . import convert as cv

FLT_MAX = 3.4028234663852886e38


@cute.jit
def scale_grid(m_rows: Int32, k_blocks: Int32, swizzled: cutlass.Constexpr[bool]):
    """(rows, columns) of the scale matrix: padded to 128x4 for the swizzled layout."""
    n_rows = m_rows
    n_cols = k_blocks
    if cutlass.const_expr(swizzled):
        n_rows = (m_rows + (SWIZZLE_ROWS - 1)) // SWIZZLE_ROWS * SWIZZLE_ROWS
        n_cols = (k_blocks + (SWIZZLE_COLS - 1)) // SWIZZLE_COLS * SWIZZLE_COLS
    return n_rows, n_cols


@cute.jit
def scale_offset(m: Int32, k: Int32, n_cols: Int32, swizzled: cutlass.Constexpr[bool]) -> Int32:
    """Flat byte offset of scale (row m, scale column k): row-major, or 128x4 swizzled."""
    off = m * n_cols + k
    if cutlass.const_expr(swizzled):
        off = (m // 128) * n_cols * 128 + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4
    return off


class BlockQuantizer:
    """The per-block arithmetic of one format and scale mode."""

    def __init__(self, fmt: Format, scale_mode: str) -> None:
        self.fmt = fmt
        self.scale_mode = scale_mode
        self.block = fmt.block
        self.out_bytes = fmt.block * fmt.element_bits // 8  # packed bytes per block
        self.nvfp4 = fmt.has_global_scale

    @cute.jit
    def global_factors(self, mG: cute.Tensor):
        """NVFP4's per-tensor `g * fp32(1/6)` and `1/g` (g read on the device; None means 1)."""
        enc_g = Float32(1.0)
        inv_g = Float32(1.0)
        if cutlass.const_expr(self.nvfp4):
            g = Float32(1.0)
            if cutlass.const_expr(mG is not None):
                g = Float32(mG[0])
            enc_g = cv.mul_rn(g, Float32(1.0 / 6.0))
            inv_g = cv.rcp_rn(g)
        return enc_g, inv_g

    @cute.jit
    def quantize(self, x: cute.Tensor, dst: cute.Tensor, enc_g: Float32, inv_g: Float32,
                 x16: cute.Tensor = None) -> Uint32:
        """Quantize the fp32 register block `x` (B values) into `dst`; return its scale byte.

        `x16`, when given, holds the same values in their 16-bit input dtype: the amax is then
        taken two at a time on the packed words (half the instructions).
        """
        amax_bits = Uint32(0)  # integer max over |x| bit patterns: NaN-aware, no fp compares
        if cutlass.const_expr(x16 is None):
            for i in cutlass.range_constexpr(self.block):
                amax_bits = cv.umax(amax_bits, cv.f32_bits(x[i]) & cv.ABS_MASK)
        else:
            packed = cute.recast_tensor(x16, Uint32)
            acc = Uint32(0)
            for i in cutlass.range_constexpr(self.block // 2):
                acc = cv.abs_max_u16x2(acc, packed[i])
            amax_bits = cv.half_amax_bits(acc, x16.element_type == cutlass.BFloat16)

        out = cute.make_rmem_tensor(self.out_bytes, Uint8)
        words = cute.recast_tensor(out, Uint32)
        scale = Uint32(0)
        if cutlass.const_expr(self.nvfp4):
            scale = cv.e4m3_byte(cv.mul_rn(cv.bits_f32(amax_bits), enc_g))
            sf = cv.e4m3_decode(scale)
            enc = Float32(0.0)
            if sf != Float32(0.0):
                enc = cute.arch.fmin(cv.rcp_rn(cv.mul_rn(sf, inv_g)), Float32(FLT_MAX))
            if amax_bits >= Uint32(cv.INF_BITS):
                scale = Uint32(self.fmt.nan_scale_byte)
            self.pack(x, enc, words)
        else:
            if cutlass.const_expr(self.scale_mode == "rceil"):
                scale = cv.ue8m0_rceil(amax_bits, 1.0 / self.fmt.maxv)
            else:
                scale = cv.ue8m0_floor(amax_bits, self.fmt.emax)
            self.pack(x, cv.exp2_int(Int32(127) - Int32(scale)), words)
        cute.autovec_copy(out, dst)
        return scale

    @cute.jit
    def pack(self, x: cute.Tensor, factor: Float32, words: cute.Tensor):
        """Convert x * factor to the element format and pack it into 32-bit words."""
        if cutlass.const_expr(self.fmt.element == "e4m3"):
            for w in cutlass.range_constexpr(self.block // 4):
                words[w] = cv.e4m3x4_pack(
                    cv.mul_rn(x[4 * w], factor),
                    cv.mul_rn(x[4 * w + 1], factor),
                    cv.mul_rn(x[4 * w + 2], factor),
                    cv.mul_rn(x[4 * w + 3], factor),
                )
        else:
            for w in cutlass.range_constexpr(self.block // 8):
                word = Uint32(0)
                for i in cutlass.range_constexpr(8):
                    word = word | (cv.e2m1_code(cv.mul_rn(x[8 * w + i], factor)) << (4 * i))
                words[w] = word
