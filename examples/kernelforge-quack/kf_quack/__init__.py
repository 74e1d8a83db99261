"""kf_quack: kernels of quack (the `quack-kernels` package, CuTe-DSL) built ahead of time by kernelforge.

quack's RMSNorm, softmax and cross-entropy forward kernels, declared as three kernelforge op
families, compiled on a CPU builder by calling quack's own kernel classes through quack's own
compile functions, and served by kernelforge's runtime: no CuTe-DSL import, no JIT at run time.
Importing this package imports neither torch nor cutlass nor quack: the ops live in
`kf_quack.ops`, the families in `kf_quack.family`.
"""
__version__ = "0.1.0"
QUACK_VERSION = "0.6.5"  # the quack-kernels release this package builds (pinned in pyproject.toml)
