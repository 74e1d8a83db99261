"""Block-scaled quantization of one register block, and the scale layouts (CuTe-DSL, no torch).

Every kernel that emits MXFP8 / MXFP4 / NVFP4 goes through `BlockQuantizer`: the kernels
differ in how they produce a block of fp32 values (plain load, RMSNorm, ...) and where
they write it, never in the quantization arithmetic, which is bit-exact to docs/numerics.md.
"""
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32

from ..formats import SWIZZLE_COLS, SWIZZLE_ROWS, Format
from . import convert as cv

FLT_MAX = 3.4028234663852886e38
FACTOR_TABLE = 128  # UE4M3 scale bytes of a non-negative amax times a positive g (0x7F: NaN)


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
def byte_views(mQ: cute.Tensor, mS: cute.Tensor):
    """The typed outputs as bytes: data [M, K*bits/8] and the scale matrix flattened."""
    q = cute.make_tensor(cute.recast_ptr(mQ.iterator, dtype=Uint8), mQ.layout)
    s = cute.make_tensor(cute.recast_ptr(mS.iterator, dtype=Uint8), cute.make_layout(cute.size(mS)))
    return q, s


@cute.jit
def scale_offset(m: Int32, k: Int32, n_cols: Int32, swizzled: cutlass.Constexpr[bool]) -> Int32:
    """Flat byte offset of scale (row m >= 0, scale column k >= 0): row-major, or 128x4 swizzled."""
    off = m * n_cols + k
    if cutlass.const_expr(swizzled):
        # Shifts and masks, not // and %: the indices are never negative, and signed division
        # costs about a dozen instructions per scale byte.
        off = (m >> 7) * (n_cols << 7) + ((k >> 2) << 9) + chunk_offset(m, k)
    return off


@cute.jit
def scale_coords(off: Int32, n_cols: Int32, swizzled: cutlass.Constexpr[bool]):
    """(row m, scale column k) of flat scale byte `off` (>= 0): the inverse of `scale_offset`."""
    m = off // n_cols
    k = off - m * n_cols
    if cutlass.const_expr(swizzled):
        chunk_cols = n_cols >> 2
        chunk_row = (off >> 9) // chunk_cols
        w = off & 511
        m = (chunk_row << 7) + (((w >> 2) & 3) << 5) + (w >> 4)
        k = (((off >> 9) - chunk_row * chunk_cols) << 2) + (w & 3)
    return m, k


@cute.jit
def chunk_offset(m: Int32, k: Int32) -> Int32:
    """Byte offset of scale (row m, column k) inside its 512-byte 128x4 swizzle chunk."""
    return ((m & 31) << 4) + (((m >> 5) & 3) << 2) + (k & 3)


def _max_abs_tree(words: list, is_bf16: bool) -> Uint32:
    """Per-half max of |words| as a tree, not a chain: independent maxes issue back to back.
    (Plain Python, unrolled while tracing.)"""
    while len(words) > 1:
        words = [cv.max_abs_half2(words[i], words[i + 1], is_bf16) for i in range(0, len(words), 2)]
    return words[0]


class BlockQuantizer:
    """The per-block arithmetic of one format and scale mode."""

    def __init__(self, fmt: Format, scale_mode: str, warp_uniform: bool = False, branch_free: bool = False) -> None:
        """`warp_uniform`: NVFP4 picks its rounding path for the converged threads of a warp
        together (see `quantize`); it helps the fused kernel with a scale that saturates some
        blocks and slows the dual tile kernel with a calibrated one, so each kernel chooses
        (docs/performance.md). `branch_free`: NVFP4 always
        takes the clamping path (one instruction more per element than the below-7 path, and
        no branch), for kernels where the compiler predicates both paths instead of branching."""
        self.fmt = fmt
        self.scale_mode = scale_mode
        self.warp_uniform = warp_uniform
        self.branch_free = branch_free
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
    def element_factor(self, scale: Uint32, inv_g: Float32) -> Float32:
        """NVFP4's element factor of a block scale byte: 0 for a zero scale, else
        `min(1 / (fp32(sf) * (1/g)), FLT_MAX)` with correctly rounded operations."""
        sf = cv.e4m3_decode(scale)
        enc = Float32(0.0)
        if sf != Float32(0.0):
            enc = cute.arch.fmin(cv.rcp_rn(cv.mul_rn(sf, inv_g)), Float32(FLT_MAX))
        return enc

    @cute.jit
    def fill_factor_table(self, table: cute.Tensor, inv_g: Float32, tidx: Int32,
                          threads: cutlass.Constexpr[int]):
        """`table[b] = element_factor(b)` for the FACTOR_TABLE scale bytes a positive g yields.

        A CTA that quantizes many NVFP4 blocks fills this once (the threads share the 128
        entries) and looks each block's factor up instead of paying the exact reciprocal and
        its branches per block; the caller syncs before the first lookup.
        """
        for j in cutlass.range_constexpr((FACTOR_TABLE + threads - 1) // threads):
            i = j * threads + tidx
            if i < FACTOR_TABLE:
                table[i] = self.element_factor(Uint32(i), inv_g)

    @cute.jit
    def quantize(self, x: cute.Tensor, dst: cute.Tensor, enc_g: Float32, inv_g: Float32,
                 x16: cute.Tensor = None, table: cute.Tensor = None) -> Uint32:
        """Quantize the register block `x` (B fp32 values) into `dst`; return its scale byte.

        `x16`, when given, holds the same values in their 16-bit input dtype: the amax is then
        taken two at a time on the packed words, signs come from them, and the MX FP4 path
        converts them two at a time without touching `x` (which the compiler then drops).
        `table`, for NVFP4, is a filled `fill_factor_table` (scale bytes outside it, from a
        negative g, are computed directly: the results are the same either way).
        """
        mag = None  # |x16| as packed words
        amax_bits = Uint32(0)  # integer max over |x| bit patterns: NaN-aware, no fp compares
        if cutlass.const_expr(x16 is None):
            for i in cutlass.range_constexpr(self.block):
                amax_bits = cv.umax(amax_bits, cv.f32_bits(x[i]) & cv.ABS_MASK)
        else:
            packed = cute.recast_tensor(x16, Uint32)
            is_bf16 = x16.element_type == cutlass.BFloat16
            if cutlass.const_expr(self.fmt.element == "e2m1" and not self.nvfp4):
                # MX FP4 rounds the magnitudes two at a time: it needs them anyway.
                mag = cute.make_rmem_tensor(self.block // 2, Uint32)
                acc = Uint32(0)
                for i in cutlass.range_constexpr(self.block // 2):
                    mag[i] = packed[i] & Uint32(cv.HALF2_ABS_MASK)
                    acc = cv.max_u16x2(acc, mag[i])
                amax_bits = cv.half_amax_bits(acc, is_bf16)
            else:
                words = [packed[i] for i in range(self.block // 2)]
                amax_bits = cv.half2_amax_bits(_max_abs_tree(words, is_bf16), is_bf16)

        out = cute.make_rmem_tensor(self.out_bytes, Uint8)
        words = cute.recast_tensor(out, Uint32)
        scale = Uint32(0)
        if cutlass.const_expr(self.nvfp4):
            scale = cv.e4m3_byte(cv.mul_rn(cv.bits_f32(amax_bits), enc_g))
            enc = Float32(0.0)
            if cutlass.const_expr(table is None):
                enc = self.element_factor(scale, inv_g)
            else:
                if scale < Uint32(FACTOR_TABLE):
                    enc = table[Int32(scale)]
                else:
                    enc = self.element_factor(scale, inv_g)
            if amax_bits >= Uint32(cv.INF_BITS):
                scale = Uint32(self.fmt.nan_scale_byte)
            # |x| * enc <= amax * enc (rounding is monotone): below 7 the E2M1 rounding needs no
            # clamp at 6, one instruction less per element. Only saturated or underflowed scales
            # and NaN/Inf blocks take the clamping path, which is exact for every block. With
            # `warp_uniform` the converged threads of the warp choose together: a warp that
            # splits runs both paths (docs/performance.md).
            if cutlass.const_expr(self.branch_free):
                self.pack(x, x16, mag, enc, words)
            else:
                fits = cv.mul_rn(cv.bits_f32(amax_bits), enc) < Float32(7.0)
                if cutlass.const_expr(self.warp_uniform):
                    fits = cute.arch.vote_all_sync(fits, cute.arch.activemask())
                if fits:
                    self.pack(x, x16, mag, enc, words, True)
                else:
                    self.pack(x, x16, mag, enc, words)
        else:
            if cutlass.const_expr(self.scale_mode == "rceil"):
                scale = cv.ue8m0_rceil(amax_bits, 1.0 / self.fmt.maxv)
            else:
                scale = cv.ue8m0_floor(amax_bits, self.fmt.emax)
            self.pack(x, x16, mag, cv.exp2_int(Int32(127) - Int32(scale)), words)
        cute.autovec_copy(out, dst)
        return scale

    @cute.jit
    def pack(self, x: cute.Tensor, x16: cute.Tensor, mag: cute.Tensor, factor: Float32,
             words: cute.Tensor, below7: cutlass.Constexpr[bool] = False):
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
                words[w] = self.e2m1_word(x, x16, mag, factor, 8 * w, below7)

    @cute.jit
    def e2m1_word(self, x: cute.Tensor, x16: cute.Tensor, mag: cute.Tensor, factor: Float32,
                  base: cutlass.Constexpr[int], below7: cutlass.Constexpr[bool] = False) -> Uint32:
        """Eight E2M1 codes of x[base:base+8] * factor in one word (element base in bits 0-3);
        `below7`: every |x| * factor is known to be below 7 (no saturation needed).

        Indices and signs are first gathered by byte permutes into U/V = bytes [e0, e2, e1, e3]
        of each group of four, then interleaved into nibbles: about 1.5 instructions per
        element instead of a shift and an OR per nibble.
        """
        # MX scales are powers of two, so 16-bit inputs times the scale are exact in 16 bits
        # and the rounding runs two at a time; NVFP4's scale is not, so it rounds in fp32.
        paired = x16 is not None and not self.nvfp4
        is_bf16 = x16 is not None and x16.element_type == cutlass.BFloat16
        uv = []
        for g in cutlass.range_constexpr(2):
            i0 = base + 4 * g
            if cutlass.const_expr(paired):
                r = []
                for k in cutlass.range_constexpr(2):
                    p = i0 // 2 + k
                    if cutlass.const_expr(is_bf16):
                        fb = cv.f32_bits(factor)
                        s = cv.mul_bf16x2(mag[p], cv.prmt(fb, fb, 0x3232))
                    else:
                        s = cv.pack_half2(cv.mul_rn(x[2 * p], factor), cv.mul_rn(x[2 * p + 1], factor),
                                          False) & Uint32(cv.HALF2_ABS_MASK)
                    r.append(cv.e2m1_index_x2(s, is_bf16))
                u = cv.prmt(r[0], r[1], 0x6240)  # lo/hi indices sit in bytes 0 and 2
            else:
                if cutlass.const_expr(below7):
                    r = [cv.e2m1_index_below7(cv.mul_abs_rn(x[i0 + k], factor)) for k in range(4)]
                else:
                    r = [cv.e2m1_index(cv.mul_rn(x[i0 + k], factor)) for k in range(4)]
                u = cv.prmt(cv.prmt(r[0], r[1], 0x40), cv.prmt(r[2], r[3], 0x40), 0x5140)
            if cutlass.const_expr(x16 is not None):
                packed = cute.recast_tensor(x16, Uint32)
                signs = cv.prmt(packed[i0 // 2], packed[i0 // 2 + 1], 0xFBD9)  # sign bytes 1 and 3
            else:
                b = [cv.f32_bits(x[i0 + k]) for k in range(4)]
                signs = cv.prmt(cv.prmt(b[0], b[1], 0xFB), cv.prmt(b[2], b[3], 0xFB), 0x5140)
            uv.append(cv.select_bits(u, signs, 0x07070707))  # index in bits 0-2, sign above
        even = cv.prmt(uv[0], uv[1], 0x5410)  # elements 0, 2, 4, 6
        odd = cv.prmt(uv[0], uv[1], 0x7632)  # elements 1, 3, 5, 7
        return cv.select_bits(even, odd << Uint32(4), 0x0F0F0F0F)


@cute.jit
def widen(x16: cute.Tensor) -> cute.Tensor:
    """fp32 copy of a bf16/fp16 register block (two values per 32-bit word)."""
    is_bf16 = x16.element_type == cutlass.BFloat16
    packed = cute.recast_tensor(x16, Uint32)
    x = cute.make_rmem_tensor(cute.size(x16), Float32)
    for i in cutlass.range_constexpr(cute.size(x16) // 2):
        x[2 * i] = cv.half2_lo(packed[i], is_bf16)
        x[2 * i + 1] = cv.half2_hi(packed[i], is_bf16)
    return x
