"""SiLU-and-mul fused with rowwise block-scaled quantization (MXFP8, NVFP4): one CuTe-DSL kernel class.

x is [M, 2N]: the gate g = x[:, :N], the up projection u = x[:, N:] (vLLM/SGLang `silu_and_mul`).
One thread owns one scale block of the output: it loads the B gate values and the B up values
of that block (16-byte vectors when the K-class guarantees alignment), computes
h = dtype(silu(g) * u) in fp32 (rounded once to x's dtype), and hands the 16-bit block to
kernelforge's shared `BlockQuantizer`, exactly as the rowwise quantize kernel does with a
loaded block. Threads are laid out over the scale matrix (rows x scale columns, padded to
128x4 for the swizzled layout), so padding bytes are written by the threads that own them.

The activation's fp32 arithmetic is pinned down operation by operation (README "Numerics"):
  e = expf(-g)          libdevice __nv_expf (math.exp without fastmath), what CUDA's expf is
  d = 1 + e             add.rn.f32 (inline PTX: never contracted with expf's last multiply)
  s = g / d             div.rn.f32 (IEEE division)
  h = dtype(s * u)      mul.rn.f32, then cvt.rn to bf16/fp16
which is torch's CUDA `F.silu(g.float()) * u.float()` rounded to the dtype.
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from kernelforge.formats import Format
from kernelforge.kernels import PDL, BlockQuantizer, byte_views, enter_dependent_grid, scale_grid, scale_offset, widen
from kernelforge.kernels import convert as cv


@dsl_user_op
def add_rn(a: Float32, b: Float32, *, loc=None, ip=None) -> Float32:
    """a + b, correctly rounded, never contracted into an FMA with the producer of a or b."""
    return Float32(llvm.inline_asm(
        T.f32(), [Float32(a).ir_value(loc=loc, ip=ip), Float32(b).ir_value(loc=loc, ip=ip)],
        "add.rn.f32 $0, $1, $2;", "=f,f,f", has_side_effects=False, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@cute.jit
def silu_mul(g: Float32, u: Float32) -> Float32:
    """fp32 silu(g) * u with every operation correctly rounded (see the module docstring)."""
    e = cute.math.exp(-g, fastmath=False)  # libdevice __nv_expf: the precise path, no FTZ
    return cv.mul_rn(cv.div_rn(g, add_rn(Float32(1.0), e)), u)


@dataclass(frozen=True)
class SiluMulQuantizeConfig:
    """Compile-time knobs of one variant; fields map one to one onto spec axes."""

    fmt: Format
    layout: str  # "linear" | "swizzled"
    scale_mode: str  # "floor" | "rceil" | "none"
    threads: int  # threads per CTA (one scale block each)


class SiluMulQuantizeKernel:
    """Host launcher (`__call__`) and device body (`kernel`) of silu-and-mul + quantize."""

    def __init__(self, cfg: SiluMulQuantizeConfig) -> None:
        self.cfg = cfg
        self.q = BlockQuantizer(cfg.fmt, cfg.scale_mode)
        self.block = cfg.fmt.block
        self.swizzled = cfg.layout == "swizzled"

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # [M, 2N] input (gate | up), row stride ld, bf16/fp16
        mQ: cute.Tensor,  # [M, N * bits / 8] packed data (float8_e4m3fn / float4_e2m1fn_x2)
        mS: cute.Tensor,  # [M, N/B] linear or [Mp, Np] swizzled scales (e8m0 / e4m3)
        mG: cute.Tensor,  # [1] fp32 global encode scale (NVFP4) or None
        stream: cuda.CUstream,
    ):
        mQ, mS = byte_views(mQ, mS)
        k_blocks = mX.shape[1] // (2 * self.block)  # scale blocks per output row (N / B)
        n_rows, n_cols = scale_grid(mX.shape[0], k_blocks, self.swizzled)
        threads = self.cfg.threads
        grid = (n_rows * n_cols + (threads - 1)) // threads
        self.kernel(mX, mQ, mS, mG, n_rows, n_cols, k_blocks).launch(
            grid=[grid, 1, 1], block=[threads, 1, 1], stream=stream, use_pdl=PDL
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mG: cute.Tensor,
               n_rows: Int32, n_cols: Int32, k_blocks: Int32):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        m_rows = mX.shape[0]
        gX = cute.zipped_divide(mX, (1, self.block))  # ((1, B), (M, 2N/B))
        gQ = cute.zipped_divide(mQ, (1, self.q.out_bytes))
        enc_g, inv_g = self.q.global_factors(mG)
        is_bf16 = mX.element_type == cutlass.BFloat16

        slot = bidx * self.cfg.threads + tidx
        m = slot // n_cols
        k = slot - m * n_cols
        if m < n_rows:
            s_off = scale_offset(m, k, n_cols, self.swizzled)
            if m < m_rows and k < k_blocks:
                g16 = cute.make_rmem_tensor(self.block, mX.element_type)
                u16 = cute.make_rmem_tensor(self.block, mX.element_type)
                cute.autovec_copy(gX[(0, None), (m, k)], g16)
                cute.autovec_copy(gX[(0, None), (m, k + k_blocks)], u16)
                h16 = cute.make_rmem_tensor(self.block, mX.element_type)
                gw = cute.recast_tensor(g16, Uint32)
                uw = cute.recast_tensor(u16, Uint32)
                hw = cute.recast_tensor(h16, Uint32)
                for i in cutlass.range_constexpr(self.block // 2):
                    lo = silu_mul(cv.half2_lo(gw[i], is_bf16), cv.half2_lo(uw[i], is_bf16))
                    hi = silu_mul(cv.half2_hi(gw[i], is_bf16), cv.half2_hi(uw[i], is_bf16))
                    hw[i] = cv.pack_half2(lo, hi, is_bf16)
                mS[s_off] = Uint8(self.q.quantize(widen(h16), gQ[(0, None), (m, k)], enc_g, inv_g, h16))
            else:
                mS[s_off] = Uint8(0)  # swizzle padding is always written as zero
