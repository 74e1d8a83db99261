"""Columnwise and dual (rowwise + columnwise) block-scaled quantization, optionally with the
random Hadamard transform (RHT) on the columnwise side, as one CuTe-DSL kernel class.

A CTA owns a tile of TILE_M rows x TILE_BLOCKS scale blocks of columns. Each thread loads whole row
blocks (B consecutive elements of a row, 16-byte vectors), quantizes them rowwise when asked,
and parks them in shared memory; after one barrier each thread takes two adjacent columns of
the tile, gathers B consecutive rows of each from shared memory (one 32-bit word per row holds
both columns for 16-bit inputs) and quantizes them into the transposed output. The input is
read from memory once for both outputs.

Tiles also cover the 128x4 padding of swizzled scales (rowwise: M to 128 and K/B to 4;
columnwise: K to 128 and M/B to 4), so every padding byte is written, as zero, by the thread
that owns it. With `exact_tiles` (the K-class guarantees M % TILE_M == 0, K % tile width == 0
and 16-byte alignment) loads need no element-level bounds checks; otherwise blocks that cross
the end of a row are loaded element by element (columnwise-only calls allow any K).
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint8, Uint32, Uint64
from cutlass.cute.nvgpu import cpasync

from kernelforge.formats import Format
from kernelforge.kernels import convert as cv
from kernelforge.kernels import FACTOR_TABLE, PDL, BlockQuantizer, byte_views, chunk_offset, enter_dependent_grid, scale_grid, scale_offset, widen
from .scale_tile import CHUNK_BYTES, store_pieces, store_rows

TILE_M = 64  # rows per tile: whole column blocks of every format (B = 16 or 32)
TILE_BLOCKS = 4  # scale blocks per tile row: one swizzle column group (128 MX / 64 NVFP4 columns,
# faster for NVFP4 than 128 columns; docs/performance.md)
THREADS = 128
SMEM_PAD_BYTES = 16  # per tile row: 16-byte row stores from neighbouring rows hit other banks
RHT_SIZE = 16  # the Hadamard transform runs over 16 consecutive rows (one NVFP4 block)
# Whole 16-bit MXFP4 tiles (the `tile` K-class) are copied into shared memory with cp.async, two
# stages: a CTA takes TILES_PER_CTA neighbouring tiles along K and copies the next while it
# quantizes this one, so a tile's loads no longer wait in registers before any work can start.
TILES_PER_CTA = 2
STAGES = 2
CHUNK_ELEMS = 8  # 16-bit elements of one 16-byte cp.async chunk
SM_SHARED_BYTES = 228 * 1024  # shared memory of a Hopper SM, of which each CTA also reserves 1 KB
CTA_RESERVED_SHARED_BYTES = 1024


@dataclass(frozen=True)
class TiledQuantizeConfig:
    """Compile-time knobs of one variant; fields map onto spec axes and the K-class."""

    fmt: Format
    layout: str  # "linear" | "swizzled" (both outputs)
    scale_mode: str  # "floor" | "rceil" | "none"
    rowwise: bool  # outputs = "dual": the rowwise output as well
    rht: bool  # transform = "rht": columnwise output of the Hadamard-transformed columns (NVFP4)
    exact_tiles: bool  # K-class: whole tiles, 16-byte aligned rows


class TiledQuantizeKernel:
    """Host launcher (`__call__`) and device body (`kernel`) of columnwise / dual quantization."""

    def __init__(self, cfg: TiledQuantizeConfig) -> None:
        self.cfg = cfg
        self.q = BlockQuantizer(cfg.fmt, cfg.scale_mode)
        self.block = cfg.fmt.block
        self.row_blocks = TILE_BLOCKS
        self.tile_k = TILE_BLOCKS * self.block
        self.pairs = self.tile_k // 2  # column pairs of a tile
        self.row_jobs = TILE_M * self.row_blocks // THREADS  # row blocks per thread: rows 2i, 2i+1
        assert self.row_jobs == 2, "a thread loads one block of a pair of rows"
        self.pair_pitch = self.tile_k + 16  # words per row pair of a 16-bit tile (= 16 mod 32 banks)
        self.col_jobs = TILE_M // self.block * self.pairs // THREADS  # column-pair blocks per thread
        self.swizzled = cfg.layout == "swizzled"
        self.row_bytes = TILE_M * cfg.fmt.element_bits // 8  # columnwise bytes of one column of a tile

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # [M, K] input, row stride ld
        mQ: cute.Tensor,  # [M, K * bits / 8] rowwise data, or None (columnwise only)
        mS: cute.Tensor,  # rowwise scales [M, K/B] / [Mp, Np], or None
        mQt: cute.Tensor,  # [K, M * bits / 8] columnwise data
        mSt: cute.Tensor,  # columnwise scales [K, M/B] / [Kp, Mbp]
        mG: cute.Tensor,  # [1] fp32 rowwise global encode scale (NVFP4) or None
        mGt: cute.Tensor,  # [1] fp32 columnwise global encode scale (NVFP4) or None
        sign_mask: Int32,  # RHT: bit i set negates row i of each 16-row group
        stream: cuda.CUstream,
    ):
        if cutlass.const_expr(self.cfg.rowwise):
            mQ, mS = byte_views(mQ, mS)
        mQt, mSt = byte_views(mQt, mSt)
        m_ext = mX.shape[0]
        if cutlass.const_expr(self.swizzled and (self.cfg.rowwise or self.block == 32)):
            m_ext = (mX.shape[0] + 127) // 128 * 128  # rowwise rows / columnwise scale columns padded
        k_ext = mX.shape[1]
        if cutlass.const_expr(self.swizzled):
            k_ext = (mX.shape[1] + 127) // 128 * 128  # columnwise rows / rowwise scale columns padded
        # K tiles on x (no launch limit), M tiles on y (<= 65535, checked by the op): consecutive
        # CTAs read neighbouring column strips of the same rows (faster than M tiles on x;
        # docs/performance.md).
        k_tiles = (k_ext + (self.tile_k - 1)) // self.tile_k
        smem = self.tile_bytes(mX.element_type) + 2 * CHUNK_BYTES + 2 * 4 * FACTOR_TABLE
        if cutlass.const_expr(self.pipelined(mX.element_type)):
            k_tiles = (k_tiles + (TILES_PER_CTA - 1)) // TILES_PER_CTA
            # The launch asks for 1 KB more than the path allocates (the size of the factor tables
            # MXFP4 has none of): it holds the path to 5 CTAs of an SM where its bounds allow 6,
            # and 6 were slower (docs/performance.md, "Adopted for MXFP4").
            smem = self.pipelined_shared_bytes() + 2 * 4 * FACTOR_TABLE
        grid = [k_tiles, (m_ext + (TILE_M - 1)) // TILE_M, 1]
        limits = {}
        if cutlass.const_expr(self.pipelined(mX.element_type)):
            limits = self.occupancy_limits()
        self.kernel(mX, mQ, mS, mQt, mSt, mG, mGt, sign_mask).launch(
            grid=grid, block=[THREADS, 1, 1], smem=smem, stream=stream, use_pdl=PDL, **limits
        )

    def occupancy_limits(self) -> dict:
        """The cp.async path's launch bounds: as many CTAs per SM as its allocations allow (the
        launch's extra kilobyte aside: `__call__`), and registers capped to match
        (ptxas otherwise keeps both stages' row blocks and columns live, over 140 registers: a third
        of the CTAs). The carveout is explicit (all shared memory) because CuTe-DSL would otherwise
        query the build machine's GPU.
        https://docs.nvidia.com/cuda/cuda-c-programming-guide/#launch-bounds"""
        ctas = SM_SHARED_BYTES // (self.pipelined_shared_bytes() + CTA_RESERVED_SHARED_BYTES)
        return {"max_number_threads": [THREADS, 1, 1], "min_blocks_per_mp": ctas, "preferred_smem_carveout": 100}

    def pipelined_shared_bytes(self) -> int:
        """Shared memory the cp.async path allocates: its stages and the staged scale chunks."""
        return STAGES * self.stage_bytes() + 2 * CHUNK_BYTES

    def pitch(self, dtype) -> int:
        """Elements per shared-memory tile row of an fp32 tile (padded)."""
        return self.tile_k + SMEM_PAD_BYTES * 8 // dtype.width

    def tile_bytes(self, dtype) -> int:
        """Shared memory of the input tile: row-major (fp32) or row-pair interleaved (16-bit)."""
        if dtype.width == 16:
            return TILE_M // 2 * self.pair_pitch * 4
        return TILE_M * self.pitch(dtype) * dtype.width // 8

    def pipelined(self, dtype) -> bool:
        """Whole tiles of a 16-bit MXFP4 input take the cp.async path (`pipelined_tiles`), the only
        format it made faster on both cards. The others keep the register path: NVFP4 issues
        instructions in most cycles, and the stages' unpaired rows (two 32-bit gathers per row
        pair) and the launch bounds' 48 registers slowed it; MXFP8 dual lost on the H100
        (docs/performance.md, "Adopted for MXFP4")."""
        return self.cfg.exact_tiles and dtype.width == 16 and self.cfg.fmt.name == "mxfp4"

    def stage_words(self) -> int:
        """32-bit words per tile row of a cp.async stage: the row plus a pad that puts the two rows
        of a thread's row pair (and a quarter-warp's 16-byte reads, `stage_slot`) on distinct banks."""
        return self.tile_k // 2 + (8 if self.block == 32 else 4)

    def stage_bytes(self) -> int:
        """Shared memory of one stage: TILE_M rows (a stage also holds the staged transposed output)."""
        return TILE_M * self.stage_words() * 4

    @cute.jit
    def stage_slot(self, kb: Int32, c: Int32) -> Int32:
        """16-byte slot of chunk c of block kb in a stage row: the chunks of a block are rotated by
        the block index, so the quarter-warp that reads four blocks of a row hits 16 banks."""
        chunks = self.block // CHUNK_ELEMS
        return kb * chunks + (c + kb) % chunks

    @cute.jit
    def pair_word(self, p: Int32) -> Int32:
        """Word offset of column pair p inside a row pair of a 16-bit tile.

        A row pair keeps, for each column pair p, the words of rows 2i and 2i+1 side by side
        (one 64-bit load then gathers both rows of a column pair). The 16-byte chunks of a
        block are rotated by the block index, so that the four threads that park the four
        blocks of a row pair write different banks at every step.
        """
        half = self.block // 2  # words of a block row
        chunks = self.block // 4  # 16-byte chunks of a block (two rows)
        kb = p // half
        c = (p % half) // 2
        return 4 * (kb * chunks + (c + kb) % chunks) + 2 * (p % 2)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mQt: cute.Tensor,
               mSt: cute.Tensor, mG: cute.Tensor, mGt: cute.Tensor, sign_mask: Int32):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        tk, bidx, _ = cute.arch.block_idx()
        if cutlass.const_expr(self.pipelined(mX.element_type)):
            self.pipelined_tiles(mX, mQ, mS, mQt, mSt, mG, mGt, sign_mask, bidx, tk, tidx)
        else:
            self.one_tile(mX, mQ, mS, mQt, mSt, mG, mGt, sign_mask, bidx, tk, tidx)

    @cute.jit
    def one_tile(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mQt: cute.Tensor, mSt: cute.Tensor,
                 mG: cute.Tensor, mGt: cute.Tensor, sign_mask: Int32, bidx: Int32, tk: Int32, tidx: Int32):
        """Tile (bidx, tk), loaded into registers and parked in shared memory (fp32 inputs, and
        the `edge` K-class whose tiles may cross the end of x)."""
        dtype = mX.element_type
        smem = cutlass.utils.SmemAllocator()
        if cutlass.const_expr(dtype.width == 16):
            sT = smem.allocate_tensor(Uint32, cute.make_layout((TILE_M // 2, self.pair_pitch),
                                                                 stride=(self.pair_pitch, 1)), 16)
        else:
            sT = smem.allocate_tensor(dtype, cute.make_layout((TILE_M, self.tile_k), stride=(self.pitch(dtype), 1)), 16)
        sQ = None
        sS = (None, None)  # staged (rowwise, columnwise) scale bytes of whole tiles, or stored directly
        if cutlass.const_expr(self.cfg.exact_tiles):
            # The staging buffer of the transposed output reuses the input tile's shared memory
            # (always larger), which is read into registers first: more CTAs fit on an SM.
            sQ = cute.make_tensor(cute.recast_ptr(sT.iterator, dtype=Uint8),
                                  cute.make_layout((self.tile_k, self.row_bytes), stride=(self.row_bytes + SMEM_PAD_BYTES, 1)))
            # Columnwise scales are staged in both layouts. Linear scale_t [K, M/B] has a row
            # stride of M/B bytes and the tile owns 4 (NVFP4) or 2 (MX) bytes of each of its
            # rows: stored directly, every warp store put one byte into each of 32 sectors
            # (256 one-byte sectors per tile); staged, each row's bytes leave as one piece
            # (`store_rows`). Linear rowwise scales are stored directly: a warp store already
            # covers 4 bytes in each of 8 rows, as many bytes per sector as the staged pieces.
            sS = (smem.allocate_tensor(Uint8, cute.make_layout(CHUNK_BYTES), 16) if self.swizzled else None,
                  smem.allocate_tensor(Uint8, cute.make_layout(CHUNK_BYTES), 16))
        raws, fulls = self.load_tile(mX, bidx, tk, tidx)
        # NVFP4's global scales after the tile's loads are in flight, not before: their reads
        # and the branches of the exact reciprocal would otherwise delay every load of the CTA.
        factors, tables = self.scale_factors(smem, mG, mGt, tidx)
        self.process_tile(mX, mQ, mS, mQt, mSt, sT, sQ, sS, factors, tables, sign_mask, raws, fulls, bidx, tk, tidx)

    @cute.jit
    def scale_factors(self, smem, mG: cute.Tensor, mGt: cute.Tensor, tidx: Int32):
        """(rowwise, columnwise) global factors, and for NVFP4 the two filled factor tables in
        shared memory (`BlockQuantizer.fill_factor_table`; the caller syncs before their use)."""
        factors = (self.q.global_factors(mG), self.q.global_factors(mGt))
        tables = (None, None)
        if cutlass.const_expr(self.q.nvfp4):
            tables = tuple(smem.allocate_tensor(Float32, cute.make_layout(FACTOR_TABLE), 16) for _ in range(2))
            for t in cutlass.range_constexpr(2):
                self.q.fill_factor_table(tables[t], factors[t][1], tidx, THREADS)
        return factors, tables

    @cute.jit
    def pipelined_tiles(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mQt: cute.Tensor, mSt: cute.Tensor,
                        mG: cute.Tensor, mGt: cute.Tensor, sign_mask: Int32, tm: Int32, tkc: Int32, tidx: Int32):
        """Tiles (tm, TILES_PER_CTA * tkc + j) of a 16-bit x in whole tiles: each is copied into a
        shared-memory stage with cp.async while the previous one is quantized (module docstring)."""
        smem = cutlass.utils.SmemAllocator()
        sIn = smem.allocate_tensor(Uint32, cute.make_layout(STAGES * TILE_M * self.stage_words()), 16)
        sS = (smem.allocate_tensor(Uint8, cute.make_layout(CHUNK_BYTES), 16) if self.swizzled else None,
              smem.allocate_tensor(Uint8, cute.make_layout(CHUNK_BYTES), 16))
        k_ext = mX.shape[1]
        if cutlass.const_expr(self.swizzled):
            k_ext = (mX.shape[1] + 127) // 128 * 128
        tk0 = tkc * TILES_PER_CTA
        n = cutlass.min((k_ext + (self.tile_k - 1)) // self.tile_k - tk0, TILES_PER_CTA)
        self.issue_tile(mX, sIn, 0, tm, tk0, tidx)
        cute.arch.cp_async_commit_group()
        # Global scales and factor tables once per CTA, while the first tile is in flight.
        factors, tables = self.scale_factors(smem, mG, mGt, tidx)
        # Unrolled: a loop keeps every copy's addresses live across its body (spilled under the
        # launch bounds).
        for j in cutlass.range_constexpr(TILES_PER_CTA):
            if j < n:
                if cutlass.const_expr(j + 1 < TILES_PER_CTA):
                    if j + 1 < n:
                        self.issue_tile(mX, sIn, (j + 1) % STAGES, tm, tk0 + j + 1, tidx)
                cute.arch.cp_async_commit_group()  # one group per tile (empty on the last)
                cute.arch.cp_async_wait_group(1)  # this tile's group has landed
                cute.arch.sync_threads()
                base = (j % STAGES) * TILE_M * self.stage_words()
                sQ = cute.make_tensor(cute.recast_ptr(sIn.iterator + base, dtype=Uint8),
                                      cute.make_layout((self.tile_k, self.row_bytes),
                                                       stride=(self.row_bytes + SMEM_PAD_BYTES, 1)))
                raws, fulls = self.stage_rows(mX, sIn, base, tm, tk0 + j, tidx)
                self.process_tile(mX, mQ, mS, mQt, mSt, sIn, sQ, sS, factors, tables, sign_mask, raws, fulls,
                                  tm, tk0 + j, tidx, base)
                cute.arch.sync_threads()  # the stage (and the staged scales) are free for the next copy

    @cute.jit
    def stage_chunks(self, sIn: cute.Tensor, dtype: cutlass.Constexpr) -> cute.Tensor:
        """The stages as 16-byte chunks of the input dtype: ((CHUNK_ELEMS), (chunks))."""
        elems = cute.make_tensor(cute.recast_ptr(sIn.iterator, dtype=dtype), cute.make_layout(cute.size(sIn) * 2))
        return cute.zipped_divide(elems, (CHUNK_ELEMS,))

    @cute.jit
    def issue_tile(self, mX: cute.Tensor, sIn: cute.Tensor, stage: Int32, tm: Int32, tk: Int32, tidx: Int32):
        """cp.async of tile (tm, tk) into `stage`, 16 bytes per copy, a row's chunks by neighbouring
        threads; a tile of the swizzle padding (outside x) copies nothing."""
        dtype = mX.element_type
        m0 = tm * TILE_M
        k0 = tk * self.tile_k
        if m0 < mX.shape[0] and k0 < mX.shape[1]:  # whole tiles: then every row and chunk is inside x
            atom = cute.make_copy_atom(cpasync.CopyG2SOp(), dtype, num_bits_per_copy=128)
            gX = cute.zipped_divide(mX, (1, CHUNK_ELEMS))  # ((1, 8), (M, K/8))
            sC = self.stage_chunks(sIn, dtype)
            row_chunks = self.tile_k // CHUNK_ELEMS
            block_chunks = self.block // CHUNK_ELEMS
            first = stage * TILE_M * self.stage_words() // 4
            for i in cutlass.range_constexpr(TILE_M * row_chunks // THREADS):
                idx = i * THREADS + tidx
                row = idx // row_chunks
                ch = idx % row_chunks
                slot = self.stage_slot(ch // block_chunks, ch % block_chunks)
                cute.copy(atom, gX[(0, None), (m0 + row, k0 // CHUNK_ELEMS + ch)],
                          sC[(None, first + row * self.stage_words() // 4 + slot)])

    @cute.jit
    def stage_rows(self, mX: cute.Tensor, sIn: cute.Tensor, base: Int32, tm: Int32, tk: Int32, tidx: Int32):
        """The thread's row blocks of the staged tile in registers (`load_tile`'s result)."""
        B = self.block
        dtype = mX.element_type
        kb = tidx % self.row_blocks
        sC = self.stage_chunks(sIn, dtype)
        raws = []
        fulls = []
        for j in cutlass.range_constexpr(self.row_jobs):
            row = self.job_row(j, tidx)
            raw = cute.make_rmem_tensor(B, dtype)
            rC = cute.zipped_divide(raw, (CHUNK_ELEMS,))
            full = tm * TILE_M + row < mX.shape[0] and tk * self.tile_k + (kb + 1) * B <= mX.shape[1]
            if full:
                for c in cutlass.range_constexpr(B // CHUNK_ELEMS):
                    cute.autovec_copy(sC[(None, (base + row * self.stage_words()) // 4 + self.stage_slot(kb, c))],
                                      rC[(None, c)])
            else:
                raw.fill(0)
            raws.append(raw)
            fulls.append(full)
        return raws, fulls

    @cute.jit
    def gather_stage(self, sIn: cute.Tensor, base: Int32, r0: Int32, p: Int32, dtype: cutlass.Constexpr):
        """`gather_pair` from a cp.async stage (rows unpaired: two 32-bit loads per row pair)."""
        B = self.block
        a = cute.make_rmem_tensor(B, dtype)
        b = cute.make_rmem_tensor(B, dtype)
        aw = cute.recast_tensor(a, Uint32)
        bw = cute.recast_tensor(b, Uint32)
        half = B // 2  # words of a block row
        col = self.stage_slot(p // half, (p % half) // 4) * 4 + p % 4
        for i in cutlass.range_constexpr(B // 2):
            lo = sIn[base + (r0 + 2 * i) * self.stage_words() + col]  # row 2i: columns 2p, 2p+1
            hi = sIn[base + (r0 + 2 * i + 1) * self.stage_words() + col]
            aw[i] = cv.prmt(lo, hi, 0x5410)
            bw[i] = cv.prmt(lo, hi, 0x7632)
        return a, b

    @cute.jit
    def job_row(self, j: int, tidx: Int32) -> Int32:
        """Tile row of the thread's row block j (the thread's block column is tidx % row_blocks)."""
        return 2 * (tidx // self.row_blocks) + j

    @cute.jit
    def load_tile(self, mX: cute.Tensor, tm: Int32, tk: Int32, tidx: Int32):
        """The thread's row blocks of tile (tm, tk) in registers (zeros outside x), and which are whole."""
        B = self.block
        dtype = mX.element_type
        m_rows = mX.shape[0]
        k_cols = mX.shape[1]
        gX = cute.zipped_divide(mX, (1, B))  # ((1, B), (M, K/B))
        raws = []
        fulls = []
        for j in cutlass.range_constexpr(self.row_jobs):
            r = tm * TILE_M + self.job_row(j, tidx)
            kb = tk * self.row_blocks + tidx % self.row_blocks
            raw = cute.make_rmem_tensor(B, dtype)
            full = r < m_rows and (kb + 1) * B <= k_cols
            if full:
                cute.autovec_copy(gX[(0, None), (r, kb)], raw)
            else:
                raw.fill(0)
                if cutlass.const_expr(not self.cfg.exact_tiles):
                    if r < m_rows:
                        for i in cutlass.range_constexpr(B):
                            if kb * B + i < k_cols:
                                raw[i] = mX[r, kb * B + i]
            raws.append(raw)
            fulls.append(full)
        return raws, fulls

    @cute.jit
    def process_tile(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mQt: cute.Tensor, mSt: cute.Tensor,
                     sT: cute.Tensor, sQ: cute.Tensor, sS, factors, tables, sign_mask: Int32, raws, fulls,
                     tm: Int32, tk: Int32, tidx: Int32, stage_base: Int32 = None):
        """Both outputs of one tile from the thread's loaded row blocks; with `stage_base` the tile
        is a cp.async stage of sT (already read into `raws`) and gathers from there."""
        staged = stage_base is not None
        B = self.block
        m_rows = mX.shape[0]
        k_cols = mX.shape[1]
        m0 = tm * TILE_M
        k0 = tk * self.tile_k
        (enc_g, inv_g), (enc_t, inv_t) = factors
        # Park the row blocks in shared memory and quantize them rowwise from registers. MX
        # formats do that before the barrier, so a warp's rowwise work fills its wait for the
        # other warps' parking; NVFP4's rowwise pass needs the factor tables the barrier publishes.
        if cutlass.const_expr(not staged):
            self.park(sT, raws, tidx)
            if cutlass.const_expr(self.q.nvfp4):
                cute.arch.sync_threads()
        if cutlass.const_expr(self.cfg.rowwise):
            self.rowwise(mQ, mS, sS, raws, fulls, enc_g, inv_g, tables[0], m_rows, k_cols, m0, k0, tidx)
        if cutlass.const_expr(not self.q.nvfp4 and not staged):
            cute.arch.sync_threads()
        if cutlass.const_expr(staged and self.cfg.rowwise):
            # Keeps ptxas from hoisting the column gathers above the rowwise pass, which would
            # hold both in registers at once (and spill under the launch bounds).
            cute.arch.sync_warp()

        # Column pairs of B rows from shared memory -> columnwise output. Whole tiles stage the
        # transposed data in shared memory and store it in 16-byte row segments afterwards: a
        # block of a column is only 8-32 bytes, and neighbouring threads' blocks lie in
        # different rows of the output.
        m_blocks = m_rows // B
        rows_c, cols_c = scale_grid(k_cols, m_blocks, self.swizzled)
        ob = self.q.out_bytes
        gQt = cute.zipped_divide(mQt, (1, ob))
        if cutlass.const_expr(self.cfg.exact_tiles):
            sQb = cute.zipped_divide(sQ, (1, ob))
        gathered = []
        for j in cutlass.range_constexpr(self.col_jobs):
            job = j * THREADS + tidx
            if cutlass.const_expr(staged):
                gathered.append(self.gather_stage(sT, stage_base, job // self.pairs * B, job % self.pairs,
                                                  mX.element_type))
            else:
                gathered.append(self.gather_pair(sT, job // self.pairs * B, job % self.pairs, mX.element_type))
        if cutlass.const_expr(self.cfg.exact_tiles):
            cute.arch.sync_threads()  # every thread has read the tile: its memory becomes the staging buffer
        for j in cutlass.range_constexpr(self.col_jobs):
            job = j * THREADS + tidx
            p = job % self.pairs
            rb = job // self.pairs
            mb = m0 // B + rb
            cols = gathered[j]
            for c in cutlass.range_constexpr(2):
                n = k0 + 2 * p + c
                if n < rows_c and mb < cols_c:
                    sc = Uint32(0)
                    if n < k_cols and mb < m_blocks:
                        v = cols[c]
                        if cutlass.const_expr(self.cfg.rht):
                            v = self.hadamard(v, sign_mask)
                        if cutlass.const_expr(self.cfg.exact_tiles):
                            dst = sQb[(0, None), (2 * p + c, rb)]
                        else:
                            dst = gQt[(0, None), (n, mb)]
                        sc = self.quantize(v, dst, enc_t, inv_t, tables[1])
                    if cutlass.const_expr(sS[1] is not None):
                        sS[1][chunk_offset(n, mb)] = Uint8(sc)
                    else:
                        mSt[scale_offset(n, mb, cols_c, self.swizzled)] = Uint8(sc)
        if cutlass.const_expr(self.cfg.exact_tiles):
            cute.arch.sync_threads()
            segs = self.row_bytes // 16
            gQs = cute.zipped_divide(mQt, (1, 16))
            sQs = cute.zipped_divide(sQ, (1, 16))
            for j in cutlass.range_constexpr(self.tile_k * segs // THREADS):
                idx = j * THREADS + tidx
                nl = idx // segs
                if k0 + nl < k_cols and m0 < m_rows:  # tiles of the swizzle padding store nothing
                    seg = cute.make_rmem_tensor(16, Uint8)
                    cute.autovec_copy(sQs[(0, None), (nl, idx % segs)], seg)
                    cute.autovec_copy(seg, gQs[(0, None), (k0 + nl, tm * segs + idx % segs)])
            if cutlass.const_expr(sS[0] is not None and self.cfg.rowwise):
                _, cols_r = scale_grid(m_rows, k_cols // B, self.swizzled)
                if k0 // B < cols_r:  # tiles of the columnwise padding have no rowwise scales
                    store_pieces(sS[0], mS, m0, k0 // B, cols_r, TILE_M, self.row_blocks, tidx, THREADS)
            if m0 // B < cols_c:  # tiles of the rowwise padding (NVFP4, M <= 64) have no columnwise scales
                if cutlass.const_expr(self.swizzled):
                    store_pieces(sS[1], mSt, k0, m0 // B, cols_c, self.tile_k, TILE_M // B, tidx, THREADS)
                else:
                    store_rows(sS[1], mSt, k0, m0 // B, cols_c, self.tile_k, TILE_M // B, tidx, THREADS)

    @cute.jit
    def rowwise(self, mQ: cute.Tensor, mS: cute.Tensor, sS, raws, fulls, enc_g: Float32, inv_g: Float32,
                table: cute.Tensor, m_rows: Int32, k_cols: Int32, m0: Int32, k0: Int32, tidx: Int32):
        """Rowwise output of the thread's row blocks (scale bytes staged in sS[0] or stored)."""
        B = self.block
        rows_r, cols_r = scale_grid(m_rows, k_cols // B, self.swizzled)
        gQ = cute.zipped_divide(mQ, (1, self.q.out_bytes))
        for j in cutlass.range_constexpr(self.row_jobs):
            r = m0 + self.job_row(j, tidx)
            kb = k0 // B + tidx % self.row_blocks
            if r < rows_r and kb < cols_r:
                sc = Uint32(0)  # swizzle padding is always written as zero
                if fulls[j]:
                    sc = self.quantize(raws[j], gQ[(0, None), (r, kb)], enc_g, inv_g, table)
                if cutlass.const_expr(sS[0] is not None):
                    sS[0][chunk_offset(r, kb)] = Uint8(sc)
                else:
                    mS[scale_offset(r, kb, cols_r, self.swizzled)] = Uint8(sc)

    @cute.jit
    def quantize(self, v: cute.Tensor, dst: cute.Tensor, enc_g: Float32, inv_g: Float32,
                 table: cute.Tensor) -> Uint32:
        """Quantize one register block of the input dtype into `dst`; return its scale byte."""
        if cutlass.const_expr(v.element_type == Float32):
            return self.q.quantize(v, dst, enc_g, inv_g, None, table)
        return self.q.quantize(widen(v), dst, enc_g, inv_g, v, table)

    @cute.jit
    def park(self, sT: cute.Tensor, raws, tidx: Int32):
        """Write the thread's two row blocks (rows 2i, 2i+1 of one block column) to the tile."""
        kb = tidx % self.row_blocks
        i = tidx // self.row_blocks
        if cutlass.const_expr(sT.element_type == Float32):
            sX = cute.zipped_divide(sT, (1, self.block))
            for j in cutlass.range_constexpr(self.row_jobs):
                cute.autovec_copy(raws[j], sX[(0, None), (2 * i + j, kb)])
        else:
            a = cute.recast_tensor(raws[0], Uint32)
            b = cute.recast_tensor(raws[1], Uint32)
            sC = cute.zipped_divide(sT, (1, 4))  # 16-byte chunks
            chunks = self.block // 4
            for c in cutlass.range_constexpr(chunks):
                chunk = cute.make_rmem_tensor(4, Uint32)
                chunk[0] = a[2 * c]
                chunk[1] = b[2 * c]
                chunk[2] = a[2 * c + 1]
                chunk[3] = b[2 * c + 1]
                cute.autovec_copy(chunk, sC[(0, None), (i, kb * chunks + (c + kb) % chunks)])

    @cute.jit
    def gather_pair(self, sT: cute.Tensor, r0: Int32, p: Int32, dtype: cutlass.Constexpr):
        """Columns 2p and 2p+1 of tile rows r0 .. r0+B-1 as two register blocks of the input dtype.

        For 16-bit inputs one 64-bit shared load per row pair holds both columns of both rows;
        byte permutes regroup them into row pairs per column (the packed form BlockQuantizer
        takes).
        """
        B = self.block
        a = None
        b = None
        if cutlass.const_expr(dtype == Float32):
            a = cute.make_rmem_tensor(B, Float32)
            b = cute.make_rmem_tensor(B, Float32)
            for i in cutlass.range_constexpr(B):
                a[i] = sT[r0 + i, 2 * p]
                b[i] = sT[r0 + i, 2 * p + 1]
        else:
            a = cute.make_rmem_tensor(B, dtype)
            b = cute.make_rmem_tensor(B, dtype)
            sD = cute.make_tensor(cute.recast_ptr(sT.iterator, dtype=Uint64),
                                  cute.make_layout((TILE_M // 2, self.pair_pitch // 2), stride=(self.pair_pitch // 2, 1)))
            col = self.pair_word(p) // 2
            aw = cute.recast_tensor(a, Uint32)
            bw = cute.recast_tensor(b, Uint32)
            for i in cutlass.range_constexpr(B // 2):
                both = sD[r0 // 2 + i, col]
                lo = Uint32(both)  # row 2i: columns 2p, 2p+1
                hi = Uint32(both >> Uint64(32))  # row 2i+1
                aw[i] = cv.prmt(lo, hi, 0x5410)  # low halves: column 2p of rows 2i, 2i+1
                bw[i] = cv.prmt(lo, hi, 0x7632)  # high halves: column 2p+1
        return a, b

    @cute.jit
    def hadamard(self, x16: cute.Tensor, sign_mask: Int32) -> cute.Tensor:
        """`bf16(x @ diag(s) H16 / 4)` of a 16-value bf16 block (docs/numerics.md RHT).

        Signs flip the inputs, a radix-2 butterfly computes the Sylvester-Hadamard product in
        fp32 and the exact 1/4 is applied before the single rounding to bf16.
        """
        v = widen(x16)
        for i in cutlass.range_constexpr(RHT_SIZE):
            flip = Uint32((sign_mask >> i) & 1) << Uint32(31)
            v[i] = cv.bits_f32(cv.f32_bits(v[i]) ^ flip)
        for s in cutlass.range_constexpr(4):  # log2(RHT_SIZE) butterfly stages
            h = 1 << s
            for i in cutlass.range_constexpr(RHT_SIZE):
                if cutlass.const_expr((i & h) == 0):
                    a = v[i]
                    b = v[i + h]
                    v[i] = a + b
                    v[i + h] = a - b
        y16 = cute.make_rmem_tensor(RHT_SIZE, x16.element_type)
        yw = cute.recast_tensor(y16, Uint32)
        for i in cutlass.range_constexpr(RHT_SIZE // 2):
            yw[i] = cv.pack_half2(v[2 * i] * Float32(0.25), v[2 * i + 1] * Float32(0.25), True)
        return y16
