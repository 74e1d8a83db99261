"""Cache prefetches (no registers, no completion to wait for)."""
from __future__ import annotations

import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op


@dsl_user_op
def prefetch_l1(t: cute.Tensor, *, loc=None, ip=None) -> None:
    """Bring the cache line holding the first element of global tensor `t` into L1."""
    llvm.inline_asm(
        None,
        [t.iterator.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip)],
        "prefetch.global.L1 [$0];",
        "l",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc,
        ip=ip,
    )
