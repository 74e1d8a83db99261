"""Rowwise block-scaled quantization (MXFP8, MXFP4, NVFP4) as one CuTe-DSL kernel class.

One thread quantizes one scale block (B consecutive elements of a row): it loads the block
(16-byte vectors when the K-class guarantees alignment) and hands it to the shared
`BlockQuantizer`. Threads are laid out over the scale matrix (rows x scale columns, padded to
128x4 for the swizzled layout) in its memory order, so padding bytes are written by the threads that own them
and every M (not only multiples of 128) needs no special path.
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8

from kernelforge.formats import Format
from kernelforge.kernels import PDL, BlockQuantizer, byte_views, enter_dependent_grid, scale_grid, widen

SM_THREADS = 2048  # resident threads per SM on sm_90 and sm_100


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
        self.q = BlockQuantizer(cfg.fmt, cfg.scale_mode)
        self.block = cfg.fmt.block
        self.swizzled = cfg.layout == "swizzled"
        self.launch_limits = self.occupancy_limits()

    def occupancy_limits(self) -> dict:
        """NVFP4 runs at full occupancy: at most 32 registers per thread.

        Its conversion issues about twice the instructions per byte of the MX formats, so on a
        card with more bandwidth per SM (H200) it is issue-bound and needs every warp an SM can
        hold; ptxas otherwise spends 40 registers on the linear layout (12 CTAs of 128 threads
        per SM instead of 16). ptxas honours a minimum of CTAs per SM only with the maximum
        threads per CTA; the carveout is explicit because CuTe-DSL would otherwise query the
        build machine's GPU (the kernel uses no shared memory: all of it goes to L1).
        https://docs.nvidia.com/cuda/cuda-c-programming-guide/#launch-bounds
        """
        if not self.cfg.fmt.has_global_scale:
            return {}
        return {"max_number_threads": [self.cfg.threads, 1, 1], "min_blocks_per_mp": SM_THREADS // self.cfg.threads,
                "preferred_smem_carveout": 0}

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # [M, K] input, row stride ld
        mQ: cute.Tensor,  # [M, K * bits / 8] packed data (float8_e4m3fn / float4_e2m1fn_x2)
        mS: cute.Tensor,  # [M, K/B] linear or [Mp, Np] swizzled scales (e8m0 / e4m3)
        mG: cute.Tensor,  # [1] fp32 global encode scale (NVFP4) or None
        stream: cuda.CUstream,
    ):
        mQ, mS = byte_views(mQ, mS)
        n_rows, n_cols = scale_grid(mX.shape[0], mX.shape[1] // self.block, self.swizzled)
        per_cta = self.cfg.threads * self.cfg.units_per_thread
        grid = (n_rows * n_cols + (per_cta - 1)) // per_cta
        # Each thread maps its scale slot to (row, column) by one division by this invariant:
        # a multiply-high and a shift with the divisor's magic computed once on the host, where
        # Int32 `//` was a signed division of about 35 instructions ahead of every thread's loads.
        # https://gmplib.org/~tege/divcnst-pldi94.pdf
        cols = cute.fast_divmod_create_divisor_v2(n_cols >> 2 if self.swizzled else n_cols)
        self.kernel(mX, mQ, mS, mG, n_rows, cols).launch(
            grid=[grid, 1, 1], block=[self.cfg.threads, 1, 1], stream=stream, use_pdl=PDL, **self.launch_limits
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mG: cute.Tensor,
               n_rows: Int32, cols: cute.FastDivmodDivisorV2):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        m_rows = mX.shape[0]
        k_blocks = mX.shape[1] // self.block
        gX = cute.zipped_divide(mX, (1, self.block))  # ((1, B), (M, K/B))
        gQ = cute.zipped_divide(mQ, (1, self.q.out_bytes))

        for j in cutlass.range_constexpr(self.cfg.units_per_thread):
            # Slots run in the scale matrix's memory order, so a warp's scale bytes are 32
            # contiguous bytes in both layouts (row-major order put a swizzled warp's bytes in
            # 8 sectors, 512 bytes apart).
            s_off = (bidx * self.cfg.units_per_thread + j) * self.cfg.threads + tidx
            m, k = slot_coords(s_off, cols, self.swizzled)
            if m < n_rows:
                if m < m_rows and k < k_blocks:
                    raw = cute.make_rmem_tensor(self.block, mX.element_type)
                    cute.autovec_copy(gX[(0, None), (m, k)], raw)
                    # NVFP4's global factors after the block's loads: their exact reciprocal
                    # branches on g, and ptxas keeps loads behind a branch, so computing them
                    # first made every thread wait for g's load before issuing its own.
                    enc_g, inv_g = self.q.global_factors(mG)
                    if cutlass.const_expr(mX.element_type == Float32):
                        mS[s_off] = Uint8(self.q.quantize(raw, gQ[(0, None), (m, k)], enc_g, inv_g))
                    else:
                        mS[s_off] = Uint8(self.q.quantize(widen(raw), gQ[(0, None), (m, k)], enc_g, inv_g, raw))
                else:
                    mS[s_off] = Uint8(0)  # swizzle padding is always written as zero


@cute.jit
def slot_coords(off: Int32, cols: cute.FastDivmodDivisorV2, swizzled: cutlass.Constexpr[bool]):
    """(row m, scale column k) of flat scale byte `off` (>= 0), as `scale_coords` computes them,
    with `cols` dividing by the scale columns (linear) or the 128x4 chunks per chunk row (swizzled)."""
    if cutlass.const_expr(swizzled):
        chunk_row, chunk_col = divmod(off >> 9, cols)
        w = off & 511
        m = (chunk_row << 7) + (((w >> 2) & 3) << 5) + (w >> 4)
        k = (chunk_col << 2) + (w & 3)
        return m, k
    return divmod(off, cols)
