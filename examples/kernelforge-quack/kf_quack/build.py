"""CuTe-DSL argument builders of the quack families (build time only: imports cutlass and quack).

Each builder maps a variant's coordinates onto the arguments of quack's own compile function for
that kernel, exactly as quack's torch-facing function passes them for such a call, and returns
what that function compiles (`kf_quack.capture`): quack's kernel object and its fake arguments,
in the order of the family's `args`, then the TVM-FFI environment stream. The compile-time choices
quack makes from the GPU it runs on are made for the variant's arch instead (RMSNorm's launch
config through quack's own heuristic; cluster sizes, which quack's kernels read from the DSL's
target arch during the compile, follow kernelforge's `--gpu-arch`).
"""
from __future__ import annotations

import importlib
from typing import Any

import torch

from kernelforge.schema import ARCH_CAPABILITY

from .capture import compiled_by


def _cute(dtype: str) -> Any:
    """quack's CuTe type for a dtype name ("none": None), from quack's own torch -> CuTe table."""
    table = importlib.import_module("quack.cute_dsl_utils").torch2cute_dtype_map
    return None if dtype == "none" else table[getattr(torch, dtype)]


def rmsnorm_args(v: Any) -> tuple[object, list[object]]:
    """`quack.rmsnorm.rmsnorm(x, weight, residual=r, out_dtype=...)` forward without autograd: no
    bias, no rstd or mean, residual_out of the residual's dtype when there is a residual."""
    rms = importlib.import_module("quack.rmsnorm")
    config = importlib.import_module("quack.rmsnorm_config")
    dtype, out, weight, res = _cute(v.dtype), _cute(v.out_dtype), _cute(v.weight_dtype), _cute(v.residual)
    launch = config.RmsNormFwdConfig.from_analytical_heuristic(
        v.n, dtype.width, arch_major=ARCH_CAPABILITY[v.arch][0], is_layernorm=False)
    call = compiled_by(rms._compile_rmsnorm_fwd, dtype, out, res, weight, None, res, v.n,
                       False, False, False, False, 0.0, config=launch)
    return call.kernel, call.args


def softmax_args(v: Any) -> tuple[object, list[object]]:
    """`quack.softmax.softmax(x)` forward: the output has x's dtype."""
    softmax = importlib.import_module("quack.softmax")
    dtype = _cute(v.dtype)
    call = compiled_by(softmax.Softmax.compile, dtype, dtype, v.n)
    return call.kernel, call.args


def cross_entropy_args(v: Any) -> tuple[object, list[object]]:
    """`quack.cross_entropy.cross_entropy(x, target)` forward: per-row loss and log-sum-exp, no
    target logits, no gradient, no class weights."""
    ce = importlib.import_module("quack.cross_entropy")
    call = compiled_by(ce.CrossEntropy.compile, _cute(v.dtype), _cute(v.target_dtype), None, v.n,
                       True, False, None, None)
    return call.kernel, call.args
