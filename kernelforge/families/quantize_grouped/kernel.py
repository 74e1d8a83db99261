"""Grouped (mixture-of-experts) rowwise quantization in one launch, as one CuTe-DSL kernel class.

Two groupings share the kernel:

* `experts`: a weight stack `[E, N, K]`; every expert gets its own scale slab (`[N, K/B]`
  linear, or the 128x4 swizzled layout of an `[N, K]` matrix, `[roundup(N,128), roundup(K/B,4)]`).
* `offsets`: activations `[T, K]` split into G groups of consecutive rows by cumulative ends
  `group_offsets[G]`; group g's swizzled scales start at row `scale_offsets[g]`, the sum of the
  earlier groups' sizes each rounded up to 128, and every row that belongs to no group (the
  padding up to 128 of each group, and all rows after the last group) is zero.

Every scale byte is either quantized from its block through the shared `BlockQuantizer` (so
the bytes equal plain `quantize`) or written as zero padding. `experts`: as in
`QuantizeKernel`, threads are laid over the padded scale matrix in its memory order, one scale
byte each. Scale row r of expert e is global row `e * rows + r`, and group g's block starts at a
multiple of 128, so in both groupings the byte offset is the plain `scale_offset` of the global scale row;
only the mapping from a scale row to an input row differs.

For `offsets` at most `MAX_CTAS` CTAs (per format) loop over the input rows that belong to a
group, a warp per row and its lanes over the row's scale columns. Each CTA first stages the
offsets in shared memory and all its threads turn them into per-group row ranges and padded
block starts (two block-wide scans over chunks of groups; CTA 0 also writes `scale_offsets`);
each warp then finds the group of each of its rows by binary search over the group ends. A
warp's first input blocks are loaded before the tables are built (their addresses need no table);
with two register stages (`PIPELINED`) a row's next blocks load while the current ones are
quantized. Offsets are made safe before use, whatever their values: `end[g] = clamp(max(offsets[0..g]), 0, T)`
(monotonic, within x), and at most `MAX_GROUPS` groups are read; for valid offsets this is the
identity. Each row also zeroes the padding rows of its group that share its 16-byte swizzle lines;
a second phase zeroes the remaining padding by whole lines of the swizzle chunks.
"""
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint8, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from kernelforge.families.quantize.kernel import slot_coords
from kernelforge.formats import SWIZZLE_ROWS, Format
from kernelforge.kernels import PDL, BlockQuantizer, byte_views, enter_dependent_grid, scale_grid, scale_offset, widen

MAX_GROUPS = 1024  # groups of one `offsets` call (shared-memory tables of MAX_GROUPS + 1 entries)
# Binary-search steps over MAX_GROUPS group ends, unrolled (a loop bounded by the actual group
# count is slower; docs/performance.md).
SEARCH_STEPS = MAX_GROUPS.bit_length() - 1
WARP = 32
TABLE = MAX_GROUPS + MAX_GROUPS // WARP + 1  # skewed entries 0..MAX_GROUPS
# `offsets` CTAs loop over the groups' input rows and the padding blocks (grid-stride) so that each
# builds its group table once for many rows, at most this many per format (2048 is best for MX;
# docs/performance.md).
# NVFP4 (80 registers, 6 CTAs of an SM) ends in a partial wave at 2048 CTAs; with 4096 each warp
# has about one row and the tail is short (docs/performance.md).
MAX_CTAS = {"mx": 2048, "nvfp4": 4096}
# `offsets`: bytes of input each lane loads (whole blocks of a row) before it quantizes the first
# of them, per format (bf16: 8 blocks per lane for MXFP8, 4 for MXFP4 and NVFP4). More blocks in
# flight cost registers and so CTAs per SM: NVFP4 at 8 blocks and MXFP4 at 8 blocks (194
# registers, 2 CTAs of an SM) were slower, MXFP8 at 4 blocks too (docs/performance.md).
ROW_BYTES_IN_FLIGHT = {"mxfp8": 512, "mxfp4": 256, "nvfp4": 128}
# Without 16-byte alignment (the `any` K-class) the loads are per element, each element in a
# register of its own: at most this many elements per lane. With MXFP8's 256 (bf16, fp16) ptxas
# kept the row in local memory (32 registers, a 1.5 KB stack frame; benchmarks/sass_stats.py) and
# the call ran 3.8x slower; 128 was slower than 64 (docs/performance.md, grouped section).
SCALAR_ELEMENTS_IN_FLIGHT = 64
# CTAs per SM of the NVFP4 `offsets` kernel: pipelined, ptxas otherwise takes 89 registers
# (5 CTAs), which was slower at G <= 64 on the H200 (docs/performance.md, grouped section).
NVFP4_OFFSETS_CTAS = 6
# Shared memory of one `offsets` CTA: the two group tables and the scan totals (16-byte aligned
# each), and the 1 KiB an sm_90 CTA reserves for the system.
SHARED_BYTES = 4 * (2 * TABLE + WARP) + 2 * 16 + 1024
SM_SHARED_BYTES = 228 * 1024  # shared memory an sm_90 SM can carve out of its L1
# `offsets` formats whose row loop (group_rows) runs two register stages on 16-byte-aligned input:
# a lane's ROW_BYTES_IN_FLIGHT are split between them, one stage's loads are in flight while the
# other is quantized, and a warp's first stage loads before the group tables are built. MXFP4 and
# NVFP4 gained on the H200; MXFP8 (192-208 registers, 2 CTAs of an SM) and misaligned input (per-
# element loads) lost, and keep one batch of loads per step (docs/performance.md, grouped section).
PIPELINED = ("mxfp4", "nvfp4")
# Register stages of a warp's first row that are loaded before the group tables are built, per
# pipelined format: NVFP4 gained with both in flight during the build, MXFP4 (119 registers) lost
# (docs/performance.md, grouped section).
FIRST_ROW_STAGES = {"mxfp4": 1, "nvfp4": 2}


@dsl_user_op
def zero_line(addr: Int64, zero: Int32, *, loc=None, ip=None) -> None:
    """Store `zero` (0) to the four 32-bit words at global address `addr` (16-byte aligned) in
    one 16-byte store."""
    llvm.inline_asm(
        None, [Int64(addr).ir_value(loc=loc, ip=ip), Int32(zero).ir_value(loc=loc, ip=ip)],
        "st.global.v4.b32 [$0], {$1, $1, $1, $1};", "l,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@cute.jit
def skew(g: Int32) -> Int32:
    """Shared-memory slot of table entry g: one pad word per 32 entries, so that the 32 lanes
    walking their chunks of consecutive entries hit 32 different banks."""
    return g + g // WARP


@dataclass(frozen=True)
class QuantizeGroupedConfig:
    """Compile-time knobs of one grouped-quantize variant; fields map one to one onto spec axes."""

    fmt: Format
    grouping: str  # "experts" | "offsets"
    layout: str  # "linear" | "swizzled" ("offsets": swizzled only)
    scale_mode: str  # "floor" | "rceil" | "none"
    threads: int  # threads per CTA


class QuantizeGroupedKernel:
    """Host launcher (`__call__`) and device body (`kernel`) of grouped rowwise quantization."""

    def __init__(self, cfg: QuantizeGroupedConfig) -> None:
        if cfg.grouping == "offsets" and cfg.layout != "swizzled":
            raise ValueError("quantize_grouped: the offsets grouping has swizzled scales only")
        self.cfg = cfg
        # `offsets`: in the unrolled row loop the compiler predicated NVFP4's below-7 and clamping
        # paths instead of branching, issuing both (SASS: 1121 of 2392 instructions predicated).
        self.q = BlockQuantizer(cfg.fmt, cfg.scale_mode, branch_free=cfg.grouping == "offsets")
        self.block = cfg.fmt.block
        self.swizzled = cfg.layout == "swizzled"
        self.experts = cfg.grouping == "experts"
        family = "nvfp4" if self.q.nvfp4 else "mx"
        self.row_bytes_in_flight = ROW_BYTES_IN_FLIGHT[cfg.fmt.name]
        self.max_ctas = MAX_CTAS[family]

    def occupancy_limits(self, mX: cute.Tensor) -> dict:
        """NVFP4 `offsets` on 16-byte-aligned input at NVFP4_OFFSETS_CTAS CTAs per SM. Misaligned
        input (per-element loads) keeps the registers ptxas chooses: capped, its row stages went to
        a stack frame. The carveout is explicit because CuTe-DSL would otherwise query the build
        machine's GPU; it is what those CTAs' tables need.
        https://docs.nvidia.com/cuda/cuda-c-programming-guide/#launch-bounds
        """
        if not self.q.nvfp4 or self.experts or mX.iterator.alignment < 16:
            return {}
        return {"max_number_threads": [self.cfg.threads, 1, 1], "min_blocks_per_mp": NVFP4_OFFSETS_CTAS,
                "preferred_smem_carveout": -(-100 * NVFP4_OFFSETS_CTAS * SHARED_BYTES // SM_SHARED_BYTES)}

    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor,  # experts: [E, N, K]; offsets: [T, K] (row stride ld)
        mOff: cute.Tensor,  # offsets: [G] int32 cumulative group ends; experts: None
        mQ: cute.Tensor,  # data, x's shape with K * bits / 8 bytes per row
        mS: cute.Tensor,  # experts: [E, N, K/B] or [E, Np, Kp]; offsets: [R, Kp] (R multiple of 128)
        mSO: cute.Tensor,  # offsets: [G] int32 scale row of each group's block (written); experts: None
        mG: cute.Tensor,  # NVFP4 global encode scales [1] or [E] / [G]; None for MX formats
        stream: cuda.CUstream,
    ):
        k_blocks = mX.shape[cute.rank(mX) - 1] // self.block
        if cutlass.const_expr(self.experts):
            n_rows, n_cols = scale_grid(mX.shape[1], k_blocks, self.swizzled)  # per expert
            total_rows = mX.shape[0] * n_rows
        else:
            _, n_cols = scale_grid(mX.shape[0], k_blocks, True)
            total_rows = mS.shape[0]
        mQ, mS = byte_views(mQ, mS)
        threads = self.cfg.threads
        grid = (total_rows * n_cols + (threads - 1)) // threads
        if cutlass.const_expr(not self.experts):
            # As many warps as scale rows, at least one CTA (with no scale byte at all it still
            # writes scale_offsets), at most max_ctas.
            warps = threads // WARP
            grid = cutlass.min(cutlass.max((total_rows + (warps - 1)) // warps, 1), self.max_ctas)
        # `experts`: each thread maps its scale slot to (expert, row, column) by multiply-high
        # divisions with magics computed once here, as `QuantizeKernel` does; two Int32 `//` were
        # signed divisions of about 35 instructions each ahead of every thread's loads.
        cols, rows = None, None
        if cutlass.const_expr(self.experts):
            cols = cute.fast_divmod_create_divisor_v2(n_cols >> 2 if self.swizzled else n_cols)
            rows = cute.fast_divmod_create_divisor_v2(n_rows)
        self.kernel(mX, mOff, mQ, mS, mSO, mG, total_rows, n_cols, cols, rows).launch(
            grid=[grid, 1, 1], block=[threads, 1, 1], stream=stream, use_pdl=PDL, **self.occupancy_limits(mX)
        )

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mOff: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor,
               mSO: cute.Tensor, mG: cute.Tensor, total_rows: Int32, n_cols: Int32,
               cols: cute.FastDivmodDivisorV2, rows: cute.FastDivmodDivisorV2):
        enter_dependent_grid()
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        if cutlass.const_expr(self.experts):
            self.expert_slots(mX, mQ, mS, mG, cols, rows, total_rows, tidx, bidx)
        else:
            self.offset_slots(mX, mOff, mQ, mS, mSO, mG, total_rows, n_cols, tidx, bidx)

    @cute.jit
    def expert_slots(self, mX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, mG: cute.Tensor,
                     cols: cute.FastDivmodDivisorV2, rows: cute.FastDivmodDivisorV2, total_rows: Int32,
                     tidx: Int32, bidx: Int32):
        """Scale byte `slot` of the stacked per-expert scale slabs: quantize or zero padding."""
        # Slots in memory order, as in `QuantizeKernel` (faster stores; docs/performance.md).
        # m: the scale row over all experts (expert e's slab
        # is rows [e*n_rows, (e+1)*n_rows), each a whole number of 128-row blocks when swizzled).
        s_off = bidx * self.cfg.threads + tidx
        m, k = slot_coords(s_off, cols, self.swizzled)
        if m < total_rows:
            e, r = divmod(m, rows)
            if r < mX.shape[1] and k < mX.shape[2] // self.block:
                gX = cute.zipped_divide(mX, (1, 1, self.block))  # ((1, 1, B), (E, N, K/B))
                gQ = cute.zipped_divide(mQ, (1, 1, self.q.out_bytes))
                mS[s_off] = self.quantize_block(gX[(0, 0, None), (e, r, k)], gQ[(0, 0, None), (e, r, k)],
                                                mG, e)
            else:
                mS[s_off] = Uint8(0)  # swizzle padding is always written as zero

    @cute.jit
    def offset_slots(self, mX: cute.Tensor, mOff: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor,
                     mSO: cute.Tensor, mG: cute.Tensor, total_rows: Int32, n_cols: Int32,
                     tidx: Int32, bidx: Int32):
        """Every scale byte of the grouped scale matrix, grid-stride: quantize, or zero where no row is."""
        smem = cutlass.utils.SmemAllocator()
        ends = smem.allocate_tensor(Int32, cute.make_layout(TABLE), 16)
        starts = smem.allocate_tensor(Int32, cute.make_layout(TABLE), 16)
        totals = smem.allocate_tensor(Int32, cute.make_layout(WARP), 16)  # per-warp scan totals
        n_groups = cutlass.min(mOff.shape[0], MAX_GROUPS)
        t_rows = mX.shape[0]
        warps = self.cfg.threads // WARP
        lane = tidx % WARP
        first_warp = bidx * warps + tidx // WARP
        n_warps = cute.arch.grid_dim()[0] * warps
        k_blocks = mX.shape[1] // self.block
        gX = cute.zipped_divide(mX, (1, self.block))  # ((1, B), (T, K/B))
        # The row loop's register stages of input blocks (group_rows; the second only when
        # pipelined). The warp's first row is known before the group tables are: when pipelined,
        # its first FIRST_ROW_STAGES stages are loaded now, so that the loads are in flight while
        # the CTA reads the offsets and builds the tables, not after.
        stage = self.stage_blocks(mX)
        stage_a = [cute.make_rmem_tensor(self.block, mX.element_type) for _ in range(stage)]
        stage_b = [cute.make_rmem_tensor(self.block, mX.element_type) for _ in range(stage if self.pipelined(mX) else 0)]
        if cutlass.const_expr(self.pipelined(mX)):
            if first_warp < t_rows:
                self.load_stage(stage_a, gX, first_warp, lane, k_blocks)
                if cutlass.const_expr(self.first_row_stages(mX) == 2):
                    self.load_stage(stage_b, gX, first_warp, lane + stage * WARP, k_blocks)
        for i in cutlass.range(tidx, n_groups, self.cfg.threads):
            ends[skew(i)] = mOff[i]  # the raw offsets, coalesced; group_table clamps them in place
        cute.arch.sync_threads()
        self.group_table(mSO, ends, starts, totals, n_groups, t_rows, tidx, bidx)
        cute.arch.sync_threads()

        total = starts[skew(n_groups)]
        s32 = cute.make_tensor(cute.recast_ptr(mS.iterator, dtype=Uint32), cute.make_layout(cute.size(mS) // 4))
        self.group_rows(mX, gX, mQ, mS, s32, mG, ends, starts, n_groups, n_cols, k_blocks, stage_a, stage_b, lane,
                        first_warp, n_warps)

        # Padding rows (each group's rows up to its next multiple of 128, and every row after the
        # last group) by whole chunks: a lane zeroes one 16-byte line of a chunk (rows lane,
        # lane + 32, ... of 4 scale columns) that holds no row of data, so a warp store covers 128
        # bytes in 4 lines, where the row loop's byte stores cover 32 bytes in 8
        # (docs/performance.md); the padding in lines that hold data the row loop zeroed. A warp
        # takes a whole block (each group's last, then every block after the last group) and walks
        # its chunks: the block's bounds are found once, not once per chunk (Nsight Compute, SASS
        # source page: per-chunk items spent 100 warp instructions each at G = 1024).
        chunk_words = SWIZZLE_ROWS  # a 128x4 chunk of scale bytes is this many 32-bit words
        tail_blocks = (total_rows - total) // SWIZZLE_ROWS
        # A lane's line is 16 contiguous bytes: one 16-byte store where the scale matrix starts on
        # a 16-byte boundary (every torch allocation does), else four word stores. Word stores
        # 16 bytes apart leave each 32-byte sector a quarter written per warp store, and most of
        # the scale matrix is this padding when groups are small.
        s_base = mS.iterator.toint()
        lines = (s_base & 15) == 0
        for e in cutlass.range(first_warp, n_groups + tail_blocks, n_warps):
            b = total // SWIZZLE_ROWS + (e - n_groups)  # a block after the last group: all padding
            first = Int32(0)
            if e < n_groups:
                # The scale row after the group's last.
                data_end = starts[skew(e)] + (ends[skew(e)] - self.first_row(ends, e))
                b = starts[skew(e + 1)] // SWIZZLE_ROWS - 1  # the group's last block (if it has one)
                first = SWIZZLE_ROWS
                if starts[skew(e + 1)] > data_end:
                    first = data_end - b * SWIZZLE_ROWS
            if lane >= first:  # row `lane` of the block is padding, so are the line's other rows
                # The block's first word, then the lane's line of each chunk.
                word = scale_offset(b * SWIZZLE_ROWS, 0, n_cols, True) // 4 + lane * 4
                if lines:
                    for c in cutlass.range(n_cols // 4):
                        zero_line(s_base + Int64(word + c * chunk_words) * 4, Int32(0))
                else:
                    for c in cutlass.range(n_cols // 4):
                        for j in cutlass.range_constexpr(SWIZZLE_ROWS // WARP):
                            s32[word + c * chunk_words + j] = Uint32(0)

    def pipelined(self, mX: cute.Tensor) -> bool:
        """Whether the row loop runs two register stages (PIPELINED formats on aligned input)."""
        return self.cfg.fmt.name in PIPELINED and mX.iterator.alignment >= 16

    def first_row_stages(self, mX: cute.Tensor) -> int:
        """Register stages of the warp's first row loaded before the group tables (0 unpipelined)."""
        return FIRST_ROW_STAGES[self.cfg.fmt.name] if self.pipelined(mX) else 0

    def stage_blocks(self, mX: cute.Tensor) -> int:
        """Input blocks of a row that each lane loads per register stage: the format's
        ROW_BYTES_IN_FLIGHT (SCALAR_ELEMENTS_IN_FLIGHT elements without 16-byte alignment),
        split in two when pipelined."""
        in_flight = self.row_bytes_in_flight // (mX.element_type.width // 8)  # elements per lane
        if mX.iterator.alignment < 16:
            in_flight = min(in_flight, SCALAR_ELEMENTS_IN_FLIGHT)
        return max(1, in_flight // self.block // (2 if self.pipelined(mX) else 1))

    @cute.jit
    def load_stage(self, raws: list, gX: cute.Tensor, row: Int32, k0: Int32, k_blocks: Int32):
        """Load blocks k0, k0 + 32, ... of input row `row` (those below k_blocks) into `raws`."""
        for u in cutlass.range_constexpr(len(raws)):
            k = k0 + u * WARP
            if k < k_blocks:
                cute.autovec_copy(gX[(0, None), (row, k)], raws[u])

    @cute.jit
    def store_stage(self, raws: list, gQ: cute.Tensor, mS: cute.Tensor, s32: cute.Tensor, row: Int32, m: Int32,
                    k0: Int32, k_blocks: Int32, n_cols: Int32, pad_word: Int32, enc_g: Float32, inv_g: Float32):
        """Quantize the loaded blocks k0, k0 + 32, ... of row `row` (scale row m) and write their
        scale bytes, zero for the scale columns past K, with the lane's padding word (group_rows)."""
        for u in cutlass.range_constexpr(len(raws)):
            k = k0 + u * WARP
            if k < n_cols:
                s_off = scale_offset(m, k, n_cols, True)
                if k < k_blocks:
                    mS[s_off] = self.quantize_raw(raws[u], gQ[(0, None), (row, k)], enc_g, inv_g)
                else:
                    mS[s_off] = Uint8(0)
                if pad_word >= 0:
                    s32[(s_off + pad_word) >> 2] = Uint32(0)

    @cute.jit
    def group_rows(self, mX: cute.Tensor, gX: cute.Tensor, mQ: cute.Tensor, mS: cute.Tensor, s32: cute.Tensor,
                   mG: cute.Tensor, ends: cute.Tensor, starts: cute.Tensor, n_groups: Int32, n_cols: Int32,
                   k_blocks: Int32, a: list, b: list, lane: Int32, first_warp: Int32, n_warps: Int32):
        """Quantize every input row that belongs to a group, a warp per row (grid-stride from
        `first_warp`, whose first stages, FIRST_ROW_STAGES of them, hold already when pipelined).

        One warp per input row of a group (grid-stride over those rows only), its lanes over the
        row's scale columns: the row's group and scale row are found once per warp and row, not
        once per scale byte (per-byte lookups and the slot division cost far more instructions
        than plain `quantize`; docs/performance.md). Striding over the scale rows instead, most
        of which are padding when groups are small, gave all the rows to the few warps whose
        rows fall in the first rows of the 128-row blocks (G = 1024: an eighth of the warps).
        Pipelined, the loads of one register stage are in flight while the other is quantized;
        otherwise each step loads its blocks and then quantizes them.
        """
        d_lane = lane % 4  # the lane's column within its 4-column chunk (k = lane mod 32)
        gQ = cute.zipped_divide(mQ, (1, self.q.out_bytes))
        # One NVFP4 global scale for every group (the common case): its factors once per thread,
        # not per block (a correctly rounded reciprocal costs about as much as a block's elements).
        shared_g = self.q.global_factors(mG)
        per_group = False
        if cutlass.const_expr(mG is not None):
            per_group = mG.shape[0] > 1
        step = len(a) * WARP  # scale columns of one stage
        for row in cutlass.range(first_warp, self.first_row(ends, n_groups), n_warps):
            if cutlass.const_expr(self.pipelined(mX)):
                if row != first_warp:
                    self.load_stage(a, gX, row, lane, k_blocks)
            g = self.group_of(row, ends, n_groups)
            m = starts[skew(g)] + (row - self.first_row(ends, g))
            # The padding rows that share this row's 16-byte swizzle lines (rows m + 32, m + 64,
            # m + 96 of its block, where the group has ended) are zeroed here, with the row's own
            # scale bytes, so that each 32-byte sector is written whole at once. Left to the
            # padding phase, the sectors were written in two halves far apart in time, and L2
            # read each one back from DRAM to merge them (Nsight Compute: G = 1024 read 42 MB more
            # than G = 64 for the same input).
            # The lanes of one 4-column chunk split that: lane l (column l % 4 = d of its chunk,
            # since k = l mod 32) zeroes the 32-bit slot of row m + 32 d, all 4 columns, if it is
            # padding in this block, so each lane issues at most one extra store per scale byte.
            left = ends[skew(g)] - row  # rows of the group from this one on, >= 1
            pad_word = Int32(-1)  # the lane's padding word's offset from the row's scale byte, or -1
            if d_lane > 0 and d_lane * WARP >= left and (m & (SWIZZLE_ROWS - 1)) + d_lane * WARP < SWIZZLE_ROWS:
                pad_word = 3 * d_lane  # the line's slot of row m, then d_lane slots (4 bytes each) on
            # NVFP4: the row's global-scale factors once per row (warp-uniform), outside the block loop.
            enc_g, inv_g = shared_g
            if cutlass.const_expr(mG is not None):
                if per_group:
                    enc_g, inv_g = self.q.global_factors(self.global_scale_of(mG, g))
            if cutlass.const_expr(self.pipelined(mX)):
                for k0 in cutlass.range(lane, n_cols, 2 * step):
                    if cutlass.const_expr(self.first_row_stages(mX) == 2):
                        if row != first_warp or k0 != lane:  # the first row's first `b` is loaded
                            self.load_stage(b, gX, row, k0 + step, k_blocks)
                    else:
                        self.load_stage(b, gX, row, k0 + step, k_blocks)
                    self.store_stage(a, gQ, mS, s32, row, m, k0, k_blocks, n_cols, pad_word, enc_g, inv_g)
                    self.load_stage(a, gX, row, k0 + 2 * step, k_blocks)
                    self.store_stage(b, gQ, mS, s32, row, m, k0 + step, k_blocks, n_cols, pad_word, enc_g, inv_g)
            else:
                for k0 in cutlass.range(lane, n_cols, step):
                    self.load_stage(a, gX, row, k0, k_blocks)
                    self.store_stage(a, gQ, mS, s32, row, m, k0, k_blocks, n_cols, pad_word, enc_g, inv_g)

    @cute.jit
    def first_row(self, ends: cute.Tensor, g: Int32) -> Int32:
        """Input row where group g begins: the clamped end of group g - 1 (0 for the first)."""
        begin = Int32(0)
        if g > 0:
            begin = ends[skew(g - 1)]
        return begin

    @cute.jit
    def group_of(self, row: Int32, ends: cute.Tensor, n_groups: Int32) -> Int32:
        """Group of input row `row` (below the last group's end): the number of group ends at or
        before it, so empty groups are passed over."""
        g = Int32(0)
        for step in cutlass.range_constexpr(SEARCH_STEPS):  # steps of 512, 256, ..., 1: up to MAX_GROUPS - 1
            nxt = g + (MAX_GROUPS >> (step + 1))
            if nxt <= n_groups:
                if ends[skew(nxt - 1)] <= row:
                    g = nxt
        return g

    @cute.jit
    def group_table(self, mSO: cute.Tensor, ends: cute.Tensor, starts: cute.Tensor, totals: cute.Tensor,
                    n_groups: Int32, t_rows: Int32, tidx: Int32, bidx: Int32):
        """The CTA turns the raw offsets in `ends` into the clamped group ends, and fills `starts`
        (first scale row of group g; `starts[n_groups]` is the total); CTA 0 also writes `mSO`.

        Thread t handles the groups [t*c, (t+1)*c); a max-scan and then a sum-scan over the
        threads' chunk results give each thread what precedes its chunk. Each thread reads and
        writes only its own chunk between the scans. Every thread of the CTA takes part (one warp
        alone walked 32 groups per lane, three times, at G = 1024 while the CTA's other warps
        waited at the barrier).
        """
        c = (n_groups + (self.cfg.threads - 1)) // self.cfg.threads
        first = tidx * c
        chunk_max = Int32(0)
        for i in cutlass.range(c):
            if first + i < n_groups:
                chunk_max = cutlass.max(chunk_max, ends[skew(first + i)])
        run = self.block_exclusive(chunk_max, tidx, totals, True)  # max of the offsets before the chunk, >= 0
        chunk_begin = cutlass.min(run, t_rows)  # = ends[first - 1], the chunk's first row
        prev = chunk_begin
        chunk_rows = Int32(0)  # scale rows of the chunk's blocks
        for i in cutlass.range(c):
            if first + i < n_groups:
                run = cutlass.max(run, ends[skew(first + i)])
                end = cutlass.min(run, t_rows)
                ends[skew(first + i)] = end
                chunk_rows = chunk_rows + (end - prev + (SWIZZLE_ROWS - 1)) // SWIZZLE_ROWS * SWIZZLE_ROWS
                prev = end
        start = self.block_exclusive(chunk_rows, tidx, totals, False)
        prev = chunk_begin
        for i in cutlass.range(c):
            if first + i < n_groups:
                starts[skew(first + i)] = start
                if bidx == 0:
                    mSO[first + i] = start
                end = ends[skew(first + i)]
                start = start + (end - prev + (SWIZZLE_ROWS - 1)) // SWIZZLE_ROWS * SWIZZLE_ROWS
                prev = end
        if tidx == self.cfg.threads - 1:
            starts[skew(n_groups)] = start  # the last thread's chunk ends at the total

    @cute.jit
    def block_exclusive(self, v: Int32, tidx: Int32, totals: cute.Tensor, take_max: cutlass.Constexpr[bool]) -> Int32:
        """Exclusive max (identity 0, for values >= 0) or sum scan of `v` over the CTA's threads
        (every thread must call it: it holds two barriers)."""
        lane = tidx % WARP
        warp = tidx // WARP
        before = self.warp_exclusive(v, lane, take_max)
        if lane == WARP - 1:
            if cutlass.const_expr(take_max):
                totals[warp] = cutlass.max(before, v)
            else:
                totals[warp] = before + v
        cute.arch.sync_threads()
        prefix = Int32(0)
        for j in cutlass.range_constexpr(self.cfg.threads // WARP - 1):
            if j < warp:
                if cutlass.const_expr(take_max):
                    prefix = cutlass.max(prefix, totals[j])
                else:
                    prefix = prefix + totals[j]
        cute.arch.sync_threads()  # the next scan writes `totals` again
        result = prefix + before
        if cutlass.const_expr(take_max):
            result = cutlass.max(prefix, before)
        return result

    @cute.jit
    def warp_exclusive(self, v: Int32, lane: Int32, take_max: cutlass.Constexpr[bool]) -> Int32:
        """Exclusive max (identity 0, for values >= 0) or sum scan of `v` over the 32 lanes."""
        for d in cutlass.range_constexpr(5):
            other = cute.arch.shuffle_sync_up(v, 1 << d)
            if lane >= (1 << d):
                if cutlass.const_expr(take_max):
                    v = cutlass.max(v, other)
                else:
                    v = v + other
        before = cute.arch.shuffle_sync_up(v, 1)
        if lane == 0:
            before = Int32(0)
        return before

    @cute.jit
    def global_scale_of(self, mG: cute.Tensor, index: Int32) -> cute.Tensor:
        """The one-element view of NVFP4 global scale `mG[index]` (clamped: one scale may serve all)."""
        return cute.make_tensor(mG.iterator + cutlass.min(index, mG.shape[0] - 1), cute.make_layout(1))

    @cute.jit
    def quantize_block(self, src: cute.Tensor, dst: cute.Tensor, mG: cute.Tensor, index: Int32) -> Uint8:
        """Load one block of the input and quantize it into `dst` (NVFP4 global scale `mG[index]`);
        its scale byte."""
        raw = cute.make_rmem_tensor(self.block, src.element_type)
        cute.autovec_copy(src, raw)
        g_one = mG
        if cutlass.const_expr(mG is not None):
            g_one = self.global_scale_of(mG, index)
        enc_g, inv_g = self.q.global_factors(g_one)
        return self.quantize_raw(raw, dst, enc_g, inv_g)

    @cute.jit
    def quantize_raw(self, raw: cute.Tensor, dst: cute.Tensor, enc_g: Float32, inv_g: Float32) -> Uint8:
        """Quantize one loaded register block into `dst` with the given global-scale factors; its scale byte."""
        scale = Uint8(0)
        if cutlass.const_expr(raw.element_type == Float32):
            scale = Uint8(self.q.quantize(raw, dst, enc_g, inv_g))
        else:
            scale = Uint8(self.q.quantize(widen(raw), dst, enc_g, inv_g, raw))
        return scale
