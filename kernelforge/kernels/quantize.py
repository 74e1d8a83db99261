"""Rowwise block-scaled quantization (MXFP8, MXFP4, NVFP4) as one CuTe-DSL kernel class.

One thread quantizes one scale block (B consecutive elements of a row): it loads the block
(16-byte vectors when the K-class guarantees alignment), takes the NaN-aware amax with an
integer max over |x| bit patterns, derives the scale, converts and packs the elements, and
writes the packed bytes and the scale byte. Threads are laid out over the scale matrix
(rows x scale columns, padded to 128x4 for the swizzled layout), so padding bytes are written
by the threads that own them and every M (not only multiples of 128) needs no special path.
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32

from ..formats import SWIZZLE_COLS, SWIZZLE_ROWS, Format
from . import convert as cv

FLT_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class QuantizeConfig:
    """Compile-time knobs of one quantize variant; fields map one to one onto spec axes."""

    fmt: Format
    layout: str  # "linear" | "swizzled"
    scale_mode: str  # "floor" | "rceil" | "none"
    threads: int  # threads per CTA
    units_per_thread: int  # scale blocks per thread


class QuantizeKernel:
    """Host launcher (`__call__`) and device body (`kernel`) of rowwise quantization."""

    def __init__(self, cfg: QuantizeConfig) -> None:
        self.cfg = cfg
        self.block = cfg.fmt.block
        self.out_bytes = cfg.fmt.block * cfg.fmt.element_bits // 8  # packed bytes per block
        self.swizzled = cfg.layout == "swizzled"
        self.nvfp4 = cfg.fmt.has_global_scale

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # [M, K] input, row stride ld
        mQ: cute.Tensor,  # [M, K * bits / 8] packed data bytes
        mS: cute.Tensor,  # [S] scale bytes (linear M*K/B, or Mp*Np swizzled)
        mG: cute.Tensor,  # [1] fp32 global encode scale (NVFP4) or None
        stream: cuda.CUstream,
    ):
        m_rows = mX.shape[0]
        k_blocks = mX.shape[1] // self.block
        n_rows = m_rows
        n_cols = k_blocks
        if cutlass.const_expr(self.swizzled):
            n_rows = (m_rows + (SWIZZLE_ROWS - 1)) // SWIZZLE_ROWS * SWIZZLE_ROWS
            n_cols = (k_blocks + (SWIZZLE_COLS - 1)) // SWIZZLE_COLS * SWIZZLE_COLS
        per_cta = self.cfg.threads * self.cfg.units_per_thread
        slots = n_rows * n_cols
        grid = (slots + (per_cta - 1)) // per_cta
        self.kernel(mX, mQ, mS, mG, n_rows, n_cols).launch(
            grid=[grid, 1, 1], block=[self.cfg.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mX: cute.Tensor,
        mQ: cute.Tensor,
        mS: cute.Tensor,
        mG: cute.Tensor,
        n_rows: Int32,
        n_cols: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        m_rows = mX.shape[0]
        k_blocks = mX.shape[1] // self.block
        gX = cute.zipped_divide(mX, (1, self.block))  # ((1, B), (M, K/B))
        gQ = cute.zipped_divide(mQ, (1, self.out_bytes))

        enc_g = Float32(1.0)  # NVFP4: g * (1/6) and 1/g, hoisted out of the unit loop
        inv_g = Float32(1.0)
        if cutlass.const_expr(self.nvfp4):
            g = Float32(1.0)
            if cutlass.const_expr(mG is not None):
                g = Float32(mG[0])
            enc_g = cv.mul_rn(g, Float32(1.0 / 6.0))
            inv_g = cv.rcp_rn(g)

        for j in cutlass.range_constexpr(self.cfg.units_per_thread):
            slot = (bidx * self.cfg.units_per_thread + j) * self.cfg.threads + tidx
            m = slot // n_cols
            k = slot - m * n_cols
            if m < n_rows:
                s_off = m * n_cols + k
                if cutlass.const_expr(self.swizzled):
                    s_off = self.swizzle_offset(m, k, n_cols)
                if m < m_rows and k < k_blocks:
                    scale = self.quantize_block(gX[(0, None), (m, k)], gQ[(0, None), (m, k)], enc_g, inv_g)
                    mS[s_off] = Uint8(scale)
                else:
                    mS[s_off] = Uint8(0)  # swizzle padding is always written as zero

    @cute.jit
    def swizzle_offset(self, m: Int32, k: Int32, n_cols: Int32) -> Int32:
        """Flat byte offset of scale (m, k) in the 128x4 swizzled layout (NUMERICS.md)."""
        return (
            (m // 128) * n_cols * 128
            + (k // 4) * 512
            + (m % 32) * 16
            + ((m % 128) // 32) * 4
            + k % 4
        )

    @cute.jit
    def quantize_block(self, src: cute.Tensor, dst: cute.Tensor, enc_g: Float32, inv_g: Float32) -> Uint32:
        """Quantize one block from `src` into `dst`; return its scale byte."""
        B = self.block
        raw = cute.make_rmem_tensor(B, src.element_type)
        cute.autovec_copy(src, raw)
        x = cute.make_rmem_tensor(B, Float32)
        x.store(raw.load().to(Float32))

        amax_bits = Uint32(0)
        for i in cutlass.range_constexpr(B):
            amax_bits = cv.umax(amax_bits, cv.f32_bits(x[i]) & cv.ABS_MASK)

        out = cute.make_rmem_tensor(self.out_bytes, Uint8)
        words = cute.recast_tensor(out, Uint32)
        scale = Uint32(0)
        if cutlass.const_expr(self.nvfp4):
            scaled_amax = cv.mul_rn(cv.bits_f32(amax_bits), enc_g)
            sf = cv.e4m3_value(scaled_amax)
            enc = Float32(0.0)
            if sf != Float32(0.0):
                enc = cv.rcp_rn(cv.mul_rn(sf, inv_g))
                enc = cute.arch.fmin(enc, Float32(FLT_MAX))
            scale = cv.e4m3_byte(scaled_amax)
            if amax_bits >= Uint32(cv.INF_BITS):
                scale = Uint32(self.cfg.fmt.nan_scale_byte)
            self.pack(x, enc, words)
        else:
            if cutlass.const_expr(self.cfg.scale_mode == "rceil"):
                scale = cv.ue8m0_rceil(amax_bits, 1.0 / self.cfg.fmt.maxv)
            else:
                scale = cv.ue8m0_floor(amax_bits, self.cfg.fmt.emax)
            self.pack(x, cv.exp2_int(Int32(127) - Int32(scale)), words)
        cute.autovec_copy(out, dst)
        return scale

    @cute.jit
    def pack(self, x: cute.Tensor, factor: Float32, words: cute.Tensor):
        """Convert x * factor to the element format and pack it into 32-bit words."""
        if cutlass.const_expr(self.cfg.fmt.element == "e4m3"):
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
