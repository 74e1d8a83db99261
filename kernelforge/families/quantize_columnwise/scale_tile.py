"""Scale bytes of one tile, staged in shared memory and stored in whole pieces.

A tile of `rows` scale rows (64 or 128, starting on a multiple of `rows`) by `cols` scale
columns (2 or 4, starting on a multiple of `cols`) lies inside one 512-byte chunk of the 128x4
layout, where it owns `cols` consecutive bytes in each of `rows // 32` groups of each of the 32
16-byte lines. Written byte by byte, each warp store touches up to 16 sectors for 32 bytes
(consecutive rows are 16 bytes apart); staged, the tile's bytes leave in 2- or 4-byte pieces
of consecutive lines, a few sectors per warp store.

The linear layout's columnwise tile (`store_rows`) is staged the same way (the same image in
shared memory) and leaves as one 2- or 4-byte piece per scale row: its rows are M/B bytes
apart, so a warp store still touches 32 sectors, but with all of the tile's bytes of each
(4x fewer one-sector writes for NVFP4, 2x for MX, than one byte per thread and row).
"""
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint16, Uint32

from kernelforge.kernels import chunk_offset, scale_offset

CHUNK_BYTES = 512


@cute.jit
def store_pieces(sS: cute.Tensor, mS: cute.Tensor, r0: Int32, c0: Int32, n_cols: Int32,
                 rows: cutlass.Constexpr[int], cols: cutlass.Constexpr[int], tidx: Int32,
                 threads: cutlass.Constexpr[int]):
    """Store the tile (r0.., c0..) staged in sS (the chunk's image) into the byte tensor mS."""
    piece_type = Uint32 if cutlass.const_expr(cols == 4) else Uint16
    groups = rows // 32
    pieces = 32 * groups
    base = scale_offset(r0 & ~127, c0 & ~3, n_cols, True)
    src = cute.recast_tensor(sS, piece_type)
    dst = cute.make_tensor(cute.recast_ptr(mS.iterator, dtype=piece_type),
                           cute.make_layout(cute.size(mS) // cols))
    for j in cutlass.range_constexpr((pieces + threads - 1) // threads):
        t = j * threads + tidx
        if t < pieces:
            off = (t // groups) * 16 + (((r0 & 127) >> 5) + t % groups) * 4 + (c0 & 3)
            dst[(base + off) // cols] = src[off // cols]


@cute.jit
def store_rows(sS: cute.Tensor, mS: cute.Tensor, r0: Int32, c0: Int32, n_cols: Int32,
               rows: cutlass.Constexpr[int], cols: cutlass.Constexpr[int], tidx: Int32,
               threads: cutlass.Constexpr[int]):
    """Store the tile (r0.., c0..) staged in sS (at `chunk_offset`, as `store_pieces` reads it)
    into the row-major byte tensor mS of `n_cols` columns: one `cols`-byte piece per row.
    Needs n_cols and c0 multiples of cols (whole tiles of the K-class) and r0 a multiple of rows."""
    piece_type = Uint32 if cutlass.const_expr(cols == 4) else Uint16
    shift = 2 if cutlass.const_expr(cols == 4) else 1
    src = cute.recast_tensor(sS, piece_type)
    dst = cute.make_tensor(cute.recast_ptr(mS.iterator, dtype=piece_type),
                           cute.make_layout(cute.size(mS) // cols))
    for j in cutlass.range_constexpr((rows + threads - 1) // threads):
        t = j * threads + tidx
        if t < rows:
            r = r0 + t
            dst[r * (n_cols >> shift) + (c0 >> shift)] = src[chunk_offset(r, c0) >> shift]
