"""Scale layout pass: block scales in the 128x4 swizzled layout rewritten row-major (linear).

The columnwise and dual kernels' tiles own 2 or 4 bytes of each linear scale row, so their
linear scale stores are partial sectors that other CTAs complete much later; in the swizzled
layout the same tiles' bytes fill whole sectors. Writing swizzled scales and then this pass
is faster at large shapes for the formats and output sets
`kernelforge.families.scale_layout.staging` lists (docs/performance.md).

A 128-row band's swizzled scales are contiguous: one 512-byte chunk per 4 scale columns, one
after another. A 4-byte word of a chunk is one row's 4 scale columns, so the pass moves words.
A CTA copies 8 consecutive chunks of a band (4 KB) into shared memory with 16-byte loads, then
writes each of the band's 128 rows' 32-byte sector (8 words, one from each chunk), two lanes
per sector. Rows past M (the band's padding) are skipped.
Both scale matrices of a dual call are rewritten by one launch (a single one: the second
pair has zero rows).
"""
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32

from kernelforge.kernels import PDL, enter_dependent_grid

BAND_ROWS = 128  # rows of a swizzled band; one thread per row
CHUNK_WORDS = 128  # 4-byte words of a 512-byte chunk (128 rows x 4 scale columns)
SECTOR_WORDS = 8  # words each thread writes: one 32-byte sector of a linear row
CTA_WORDS = SECTOR_WORDS * CHUNK_WORDS  # the 8 chunks one CTA rewrites (4 KB)
VECTOR_WORDS = 4  # 16-byte loads


class ScaleUnswizzleKernel:
    """Host launcher and device body of the swizzled -> linear scale pass."""

    @cute.jit
    def __call__(
        self,
        mSrc: cute.Tensor,  # [Mp * Np / 4] int32: swizzled scales (flat), Mp = roundup(M, 128)
        mDst: cute.Tensor,  # [M, Np / 4] int32: linear scales, Np / 4 a multiple of 8
        mSrcT: cute.Tensor,  # a second pair (the dual call's columnwise scales; zero rows: none)
        mDstT: cute.Tensor,
        stream: cuda.CUstream,
    ):
        ctas = self.ctas(mDst)
        self.kernel(mSrc, mDst, mSrcT, mDstT, ctas).launch(
            grid=[ctas + self.ctas(mDstT), 1, 1], block=[BAND_ROWS, 1, 1], smem=CTA_WORDS * 4, stream=stream,
            use_pdl=PDL
        )

    @cute.jit
    def ctas(self, mDst: cute.Tensor) -> Int32:
        """One CTA per band and sector column."""
        return (mDst.shape[0] + (BAND_ROWS - 1)) // BAND_ROWS * (mDst.shape[1] // SECTOR_WORDS)

    @cute.kernel
    def kernel(self, mSrc: cute.Tensor, mDst: cute.Tensor, mSrcT: cute.Tensor, mDstT: cute.Tensor, ctas: Int32):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        sChunks = cutlass.utils.SmemAllocator().allocate_tensor(Int32, cute.make_layout(CTA_WORDS), 16)
        if bidx < ctas:
            self.band_sector(mSrc, mDst, sChunks, bidx, tidx)
        else:
            self.band_sector(mSrcT, mDstT, sChunks, bidx - ctas, tidx)

    @cute.jit
    def band_sector(self, mSrc: cute.Tensor, mDst: cute.Tensor, sChunks: cute.Tensor, cta: Int32, tidx: Int32):
        """Sector `cta % sectors` of the linear rows of band `cta // sectors` (thread: row)."""
        words = mDst.shape[1]
        sectors = words // SECTOR_WORDS
        band = cta // sectors
        sector = cta - band * sectors
        first = (band * words + sector * SECTOR_WORDS) * CHUNK_WORDS // VECTOR_WORDS
        gSrc = cute.zipped_divide(mSrc, (VECTOR_WORDS,))  # ((4), (S / 4))
        sSrc = cute.zipped_divide(sChunks, (VECTOR_WORDS,))
        for i in cutlass.range_constexpr(CTA_WORDS // VECTOR_WORDS // BAND_ROWS):
            v = i * BAND_ROWS + tidx
            cute.autovec_copy(gSrc[(None, first + v)], sSrc[(None, v)])
        cute.arch.sync_threads()
        # Two lanes per row, one 16-byte half of its sector each: a warp store is 16 whole sectors
        # (one lane per row would send each sector as two half-sector L2 writes; docs/performance.md).
        gDst = cute.zipped_divide(mDst, (1, VECTOR_WORDS))  # ((1, 4), (M, words / 4))
        half = tidx & 1
        for r in cutlass.range_constexpr(2):
            row = r * (BAND_ROWS // 2) + (tidx >> 1)
            m = band * BAND_ROWS + row
            if m < mDst.shape[0]:
                # Row m's word in a chunk: 16-byte line m % 32, group (m % 128) // 32 of it.
                word = half * VECTOR_WORDS * CHUNK_WORDS + (row & 31) * 4 + (row >> 5)
                piece = cute.make_rmem_tensor(VECTOR_WORDS, Int32)
                for i in cutlass.range_constexpr(VECTOR_WORDS):
                    piece[i] = sChunks[i * CHUNK_WORDS + word]
                cute.autovec_copy(piece, gDst[(0, None), (m, sector * 2 + half)])
