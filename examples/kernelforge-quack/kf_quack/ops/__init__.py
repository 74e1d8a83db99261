"""The torch ops: quack's forward kernels served by kernelforge's runtime (`kernelforge.extend`).

Kernels come from the cache layers kernelforge reads (sha256-checked loads, no CuTe-DSL, no JIT;
neither cutlass nor quack is imported), for the coordinates the spec files of
`kf_quack/data/specs/` declare; any other raises `kernelforge.errors.KernelNotBuilt` with the
build command. Each op is a `TorchOp`: its eager function, or its custom op under torch.compile.
"""
from .cross_entropy import cross_entropy, cross_entropy_op, cross_entropy_rows
from .rmsnorm import rmsnorm, rmsnorm_op
from .softmax import softmax, softmax_op

__all__ = ["cross_entropy", "cross_entropy_op", "cross_entropy_rows", "rmsnorm", "rmsnorm_op", "softmax", "softmax_op"]
