"""RMSNorm (optionally after a residual add) fused with rowwise block-scaled quantization.

Each row of H elements is split over `row_threads` threads of one CTA, or of a cluster of
CTAs, each thread holding up to `units` whole scale blocks (block b of a row lives on
thread b % (row_threads * cluster)); small rows pack several to a CTA. A thread loads its
blocks once into registers (adding and writing back the residual on the way), the row's sum
of squares is reduced with warp shuffles, shared memory across the warps of a row and
distributed shared memory across the CTAs of a cluster, and the same registers are then
normalized, rounded to the input dtype and quantized by the shared `BlockQuantizer`. The
input is read from memory exactly once.
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32

from kernelforge.formats import Format
from kernelforge.kernels import convert as cv, dsmem
from kernelforge.kernels import PDL, BlockQuantizer, byte_views, enter_dependent_grid, scale_grid, scale_offset, widen

WARP = 32
MIN_CTA_THREADS = 128  # small rows pack into CTAs of at least this many threads
# A thread holding 64 elements keeps 32 registers of row data; left alone ptxas gives the NVFP4
# kernels 72-78 registers (7 CTAs of 128 threads per SM). Capping them at 64 lets 8 fit, with no
# spills beyond 8 bytes (docs/performance.md).
# Variants with fewer elements stay uncapped: a cap makes ptxas grow them up to it, fewer CTAs.
CAPPED_ELEMENTS = 64
MAX_REGISTERS = 64
SM_REGISTERS = 65536  # per SM on sm_90 and sm_100
SM_SHARED_BYTES = 228 * 1024  # the largest shared-memory carveout of an SM on sm_90 and sm_100
# Shared memory of one CTA, bounded: 1.5 KiB as compiled (the partial-sum arrays and CuTe's static
# allocation) plus the 1 KiB the driver reserves per CTA.
CTA_SHARED_BOUND = 4096


@dataclass(frozen=True)
class RMSNormQuantizeConfig:
    """Compile-time knobs of one variant; fields map onto spec axes and the hidden-size class."""

    fmt: Format
    layout: str  # "linear" | "swizzled"
    scale_mode: str  # "floor" | "rceil" | "none"
    add_residual: bool  # residual = "add": rmsnorm(x + residual), residual overwritten
    max_k: int  # largest hidden size of the K-class
    units: int  # scale blocks per thread (at most)
    cluster: int  # CTAs sharing one row


class RMSNormQuantizeKernel:
    """Host launcher (`__call__`) and device body (`kernel`) of the fused op."""

    def __init__(self, cfg: RMSNormQuantizeConfig) -> None:
        self.cfg = cfg
        self.q = BlockQuantizer(cfg.fmt, cfg.scale_mode, warp_uniform=True)
        self.block = cfg.fmt.block
        self.swizzled = cfg.layout == "swizzled"
        # Scale columns padded to 4 must also have an owner (they get the zero padding bytes).
        padded = (cfg.max_k // self.block + 3) // 4 * 4
        per_cta = -(-padded // (cfg.units * cfg.cluster))
        self.row_threads = 1 << max(0, (per_cta - 1).bit_length())  # a power of two: shuffles
        self.units = -(-padded // (self.row_threads * cfg.cluster))  # <= cfg.units
        self.cta_rows = max(1, MIN_CTA_THREADS // self.row_threads) if cfg.cluster == 1 else 1
        self.threads = self.row_threads * self.cta_rows
        self.row_warps = max(1, self.row_threads // WARP)
        self.smem = 512 if self.row_warps > 1 or cfg.cluster > 1 else 0  # >= the partial-sum arrays
        self.launch_limits = self.occupancy_limits(cfg.units * self.block)
        # Weight blocks loaded with x in pass 1 (see `kernel`): single-CTA rows, uncapped registers.
        self.early_weight = cfg.cluster == 1 and cfg.units * self.block < CAPPED_ELEMENTS

    def occupancy_limits(self, elements: int) -> dict:
        """Launch options that cap the registers of `elements`-per-thread variants (else none).

        ptxas honours a minimum of CTAs per SM only together with the maximum threads per CTA.
        The carveout is given explicitly (room for those CTAs' shared memory, the rest left to
        L1): without one, CuTe-DSL queries the GPU at compile time, and builds run without one.
        """
        if elements < CAPPED_ELEMENTS:
            return {}
        ctas = SM_REGISTERS // (self.threads * MAX_REGISTERS)
        return {"max_number_threads": [self.threads, 1, 1], "min_blocks_per_mp": ctas,
                "preferred_smem_carveout": -(-100 * ctas * CTA_SHARED_BOUND // SM_SHARED_BYTES)}

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # [M, H] input
        mR: cute.Tensor,  # [M, H] residual, read and overwritten with dtype(x + residual); or None
        mW: cute.Tensor,  # [H] weight, input dtype
        mQ: cute.Tensor,  # [M, H * bits / 8] packed data (float8_e4m3fn / float4_e2m1fn_x2)
        mS: cute.Tensor,  # [M, H/B] linear or [Mp, Np] swizzled scales (e8m0 / e4m3)
        mG: cute.Tensor,  # [1] fp32 global encode scale (NVFP4) or None
        eps: Float32,
        stream: cuda.CUstream,
    ):
        mQ, mS = byte_views(mQ, mS)
        n_rows, n_cols = scale_grid(mX.shape[0], mX.shape[1] // self.block, self.swizzled)
        grid = (n_rows + (self.cta_rows - 1)) // self.cta_rows * self.cfg.cluster
        limits = self.launch_limits
        if cutlass.const_expr(self.cfg.cluster > 1):
            self.kernel(mX, mR, mW, mQ, mS, mG, eps, n_rows, n_cols).launch(
                grid=[grid, 1, 1], block=[self.threads, 1, 1], cluster=[self.cfg.cluster, 1, 1],
                smem=self.smem, stream=stream, use_pdl=PDL, **limits
            )
        else:
            self.kernel(mX, mR, mW, mQ, mS, mG, eps, n_rows, n_cols).launch(
                grid=[grid, 1, 1], block=[self.threads, 1, 1], smem=self.smem, stream=stream, use_pdl=PDL,
                **limits
            )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mQ: cute.Tensor,
               mS: cute.Tensor, mG: cute.Tensor, eps: Float32, n_rows: Int32, n_cols: Int32):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        B = self.block
        rt = self.row_threads
        stride = rt * self.cfg.cluster  # blocks of a row covered by one unit of every thread
        m_rows = mX.shape[0]
        hidden = mX.shape[1]
        k_blocks = hidden // B
        row = bidx // self.cfg.cluster * self.cta_rows + tidx // rt
        lane = bidx % self.cfg.cluster * rt + tidx % rt
        gX = cute.zipped_divide(mX, (1, B))  # ((1, B), (M, H/B))
        gR = None
        if cutlass.const_expr(mR is not None):
            gR = cute.zipped_divide(mR, (1, B))
        gQ = cute.zipped_divide(mQ, (1, self.q.out_bytes))
        gW = cute.zipped_divide(mW, (B,))  # ((B,), (H/B,))
        dtype = mX.element_type
        is_bf16 = dtype == cutlass.BFloat16
        if cutlass.const_expr(self.cfg.cluster > 1):
            cute.arch.cluster_arrive_relaxed()  # "started"; waited for before touching peers' smem

        # Pass 1: load (and add) every owned block once; the row stays in registers.
        h = [cute.make_rmem_tensor(B, dtype) for _ in range(self.units)]
        res = [None] * self.units
        if cutlass.const_expr(mR is not None):
            res = [cute.make_rmem_tensor(B, dtype) for _ in range(self.units)]
        sumsq = Float32(0.0)
        wr = [cute.make_rmem_tensor(B, dtype) if self.early_weight else None for _ in range(self.units)]
        if cutlass.const_expr(self.cfg.cluster == 1):
            # Every load issued before any value is used: a use inside the per-block branch makes
            # each block's load wait for the previous block's arithmetic.
            for i in cutlass.range_constexpr(self.units):
                b = lane + i * stride
                if row < m_rows and b < k_blocks:
                    self.load_block(gX, gR, h[i], res[i], row, b)
            # The weight blocks too, while x's loads are in flight: loaded in pass 2, after the
            # row's reduction, their round trip to L2 was the second largest stall of short rows
            # (Nsight Compute source page: 24% of the warp samples at 4096x1536, the first use of
            # w). Only where registers are not capped: 16-64 more would spill the capped variants.
            # An L1 prefetch instead (no registers) was 1.1-1.6x slower (docs/performance.md).
            if cutlass.const_expr(self.early_weight):
                for i in cutlass.range_constexpr(self.units):
                    b = lane + i * stride
                    if row < m_rows and b < k_blocks:
                        cute.autovec_copy(gW[(None,), b], wr[i])
            # Blocks past the row (H below the class bound) are skipped, not zero-filled and
            # summed: faster for NVFP4 and 8 registers fewer (docs/performance.md).
            for i in cutlass.range_constexpr(self.units):
                b = lane + i * stride
                if row < m_rows and b < k_blocks:
                    if cutlass.const_expr(mR is not None):
                        self.add_residual(gR, h[i], res[i], row, b)
                    sumsq = self.sum_squares(h[i], sumsq)
        else:
            # Per block, but with every later block of x and every weight block prefetched into
            # L1 first: no registers held, and each load then waits on L1 instead of memory.
            for i in cutlass.range_constexpr(self.units):
                b = lane + i * stride
                if row < m_rows and b < k_blocks:
                    if cutlass.const_expr(i > 0):
                        cute.arch.prefetch(gX[(0, None), (row, b)].iterator.llvm_ptr, cache_level="L1")
                    cute.arch.prefetch(gW[(None,), b].iterator.llvm_ptr, cache_level="L1")
            for i in cutlass.range_constexpr(self.units):
                b = lane + i * stride
                if row < m_rows and b < k_blocks:
                    self.load_block(gX, gR, h[i], res[i], row, b)
                    if cutlass.const_expr(mR is not None):
                        self.add_residual(gR, h[i], res[i], row, b)
                    sumsq = self.sum_squares(h[i], sumsq)

        enc_g, inv_g = self.q.global_factors(mG)  # its load overlaps the reduction
        sumsq = self.row_sum(sumsq, tidx, bidx)
        rstd = cv.rcp_rn(cv.sqrt_rn(cv.div_rn(sumsq, Float32(hidden)) + eps))

        # Pass 2: normalize, round to the input dtype, quantize; zero the scale padding.
        for i in cutlass.range_constexpr(self.units):
            b = lane + i * stride
            if row < n_rows and b < n_cols:
                s_off = scale_offset(row, b, n_cols, self.swizzled)
                if row < m_rows and b < k_blocks:
                    w = wr[i]
                    if cutlass.const_expr(not self.early_weight):
                        w = cute.make_rmem_tensor(B, dtype)
                        cute.autovec_copy(gW[(None,), b], w)
                    hf = widen(h[i])
                    wf = widen(w)
                    y16 = cute.make_rmem_tensor(B, dtype)
                    yw = cute.recast_tensor(y16, Uint32)
                    for j in cutlass.range_constexpr(B // 2):
                        yw[j] = cv.pack_half2((hf[2 * j] * rstd) * wf[2 * j],
                                              (hf[2 * j + 1] * rstd) * wf[2 * j + 1], is_bf16)
                    mS[s_off] = Uint8(self.q.quantize(widen(y16), gQ[(0, None), (row, b)], enc_g, inv_g, y16))
                else:
                    mS[s_off] = Uint8(0)

    @cute.jit
    def load_block(self, gX: cute.Tensor, gR: cute.Tensor, h: cute.Tensor, r: cute.Tensor, row: Int32, b: Int32):
        """Block b of the row of x (and of the residual) into registers; gX/gR are block views."""
        cute.autovec_copy(gX[(0, None), (row, b)], h)
        if cutlass.const_expr(gR is not None):
            cute.autovec_copy(gR[(0, None), (row, b)], r)

    @cute.jit
    def add_residual(self, gR: cute.Tensor, h: cute.Tensor, r: cute.Tensor, row: Int32, b: Int32):
        """h = dtype(x + residual), written back to the residual (block view gR)."""
        h.store((h.load().to(Float32) + r.load().to(Float32)).to(h.element_type))
        cute.autovec_copy(h, gR[(0, None), (row, b)])

    @cute.jit
    def sum_squares(self, h: cute.Tensor, acc: Float32) -> Float32:
        """acc plus the squares of the block's values, in element order."""
        v = widen(h)
        for j in cutlass.range_constexpr(self.block):
            acc = acc + v[j] * v[j]
        return acc

    @cute.jit
    def row_sum(self, v: Float32, tidx: Int32, bidx: Int32) -> Float32:
        """Sum `v` over every thread of a row (fixed order: deterministic, equal on all CTAs)."""
        v = cute.arch.warp_reduction_sum(v, threads_in_group=min(self.row_threads, WARP))
        if cutlass.const_expr(self.row_warps > 1 or self.cfg.cluster > 1):
            smem = cutlass.utils.SmemAllocator()
            parts = smem.allocate_tensor(Float32, cute.make_layout(self.cta_rows * self.row_warps), 16)
            warp = tidx // WARP
            if tidx % WARP == 0:
                parts[warp] = v
            cute.arch.sync_threads()
            first = warp // self.row_warps * self.row_warps
            v = Float32(0.0)
            for w in cutlass.range_constexpr(self.row_warps):
                v = v + parts[first + w]
            if cutlass.const_expr(self.cfg.cluster > 1):
                # Every CTA of the cluster writes its partial into slot `rank` of every CTA's
                # array; the cluster barrier (release/acquire) makes them visible.
                n = self.cfg.cluster
                peer = smem.allocate_tensor(Float32, cute.make_layout(n), 16)
                rank = bidx % n
                cute.arch.cluster_wait()  # every peer CTA is running (its smem exists)
                if tidx < n:
                    dsmem.store_f32(peer.iterator + rank, tidx, v)
                cute.arch.cluster_arrive()
                cute.arch.cluster_wait()
                v = Float32(0.0)
                for c in cutlass.range_constexpr(n):
                    v = v + peer[c]
        return v
