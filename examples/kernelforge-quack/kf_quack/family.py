"""The op families `quack_rmsnorm`, `quack_softmax` and `quack_cross_entropy` (imports neither torch,
nor cutlass, nor quack).

Declared to kernelforge through the entry points `kernelforge.ops` (pyproject.toml). Each family's
sources are this package's builder files and quack's own modules (`module_sources` finds their
files without importing quack), so a cache key changes with quack's code as it does with ours.
"""
from __future__ import annotations

from pathlib import Path

from kernelforge.registry import OpFamily, module_sources
from kernelforge.schema import Axis, op_schema

HERE = Path(__file__).resolve().parent
SPECS = HERE / "data" / "specs"
DISTRIBUTION = "kernelforge-quack"

RMSNORM, SOFTMAX, CROSS_ENTROPY = "quack_rmsnorm", "quack_softmax", "quack_cross_entropy"
OPS = (RMSNORM, SOFTMAX, CROSS_ENTROPY)

FLOATS = ("bfloat16", "float16", "float32")
# N, the row length: a compile-time constant of quack's kernels. A multiple of 8, so that rows are
# whole 16-byte vectors (quack's widest access) in every dtype; the `aligned` K-class's 16-byte rule
# on x's pointer and row stride is then at least what quack's fake tensors assume (the kernel's own
# argument checks hold the other tensors to theirs).
N = Axis("n", int, check=lambda v: 8 <= v <= 262144 and v % 8 == 0, expected="a multiple of 8 in 8..262144")
WEIGHT_DTYPE = Axis("weight_dtype", str, choices=(*FLOATS, "none"))
OUT_DTYPE = Axis("out_dtype", str, choices=FLOATS)
RESIDUAL = Axis("residual", str, choices=("none", *FLOATS))  # the residual's dtype (and residual_out's)
TARGET_DTYPE = Axis("target_dtype", str, choices=("int64", "int32"))

# Every quack module the builders load (quack's package init imports all three kernels), hashed
# into each family's keys; tests/test_family.py checks that this list covers what a build imports.
QUACK_MODULES = (
    "quack", "quack.autotuner", "quack.bench", "quack.bench.bench_utils", "quack.cache", "quack.cache.async_compile",
    "quack.cache.jit", "quack.compile_utils", "quack.copy_utils", "quack.cross_entropy", "quack.cute_dsl_utils",
    "quack.dsl", "quack.dsl.cute_tensor", "quack.dsl.cute_tensor_indexing", "quack.dsl.mixed_constexpr_if",
    "quack.dsl.torch_library_op", "quack.layout_utils", "quack.pipeline", "quack.reduce", "quack.reduction_base",
    "quack.rmsnorm", "quack.rmsnorm_config", "quack.rounding", "quack.softmax", "quack.utils",
)
OWN_SOURCES = ("family.py", "build.py", "capture.py")
QUACK_SOURCES = module_sources(*QUACK_MODULES)  # ModuleNotFoundError without quack-kernels installed


def _family(name: str, dispatch: tuple, args: tuple[str, ...], builder: str, api: str) -> OpFamily:
    return OpFamily(
        schema=op_schema(name, (*dispatch, "kclass", "arch")),
        sources=(*OWN_SOURCES, *QUACK_SOURCES),
        source_root=HERE,
        builder=f"kf_quack.build:{builder}",
        args=args,
        spec_files=(SPECS / f"{name}.toml",),
        api=(f"kf_quack.ops:{api}",),
    )


# The exported functions take quack's compiled signatures: every optional tensor of quack's kernel
# is an argument (None where the variant has none), then its runtime scalar (eps, ignore_index).
RMSNORM_FAMILY = _family(RMSNORM, ("dtype", WEIGHT_DTYPE, OUT_DTYPE, RESIDUAL, N),
                         ("x", "weight", "bias", "residual", "out", "residual_out", "rstd", "mean", "eps"),
                         "rmsnorm_args", "rmsnorm")
SOFTMAX_FAMILY = _family(SOFTMAX, ("dtype", N), ("x", "out"), "softmax_args", "softmax")
CROSS_ENTROPY_FAMILY = _family(CROSS_ENTROPY, ("dtype", TARGET_DTYPE, N),
                               ("x", "target", "target_logit", "loss", "lse", "dx", "weight", "ignore_index"),
                               "cross_entropy_args", "cross_entropy")
FAMILIES = (RMSNORM_FAMILY, SOFTMAX_FAMILY, CROSS_ENTROPY_FAMILY)


def ensure_registered() -> tuple[OpFamily, ...]:
    """The three families as kernelforge's registry serves them, declaring them first where needed.

    Installed (`pip install -e`), the package's entry points declare them. Importable only
    (PYTHONPATH=examples/kernelforge-quack), they are registered from code under the package's
    distribution name and version, which are part of every cache key, so a cache built from the
    installed package is served.
    """
    from kernelforge.registry import find_family, register

    from . import __version__

    return tuple(find_family(f.name) or register(f, distribution=DISTRIBUTION, version=__version__)
                 for f in FAMILIES)
