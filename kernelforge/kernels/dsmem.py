"""Distributed shared memory (thread-block clusters, sm_90+): store into a peer CTA's smem."""
from __future__ import annotations

import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


@dsl_user_op
def store_f32(smem_ptr: cute.Pointer, cta_rank: Int32, v: Float32, *, loc=None, ip=None) -> None:
    """Write v at `smem_ptr` (a local shared-memory address) in CTA `cta_rank` of the cluster."""
    remote = cute.arch.map_dsmem_ptr(smem_ptr, cta_rank, loc=loc, ip=ip)
    llvm.inline_asm(
        None,
        [remote.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip), Float32(v).ir_value(loc=loc, ip=ip)],
        "st.shared::cluster.f32 [$0], $1;",
        "r,f",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
