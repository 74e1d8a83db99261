"""The ops' argument checks, on the CPU: each bad argument is named before any kernel is looked up."""
from __future__ import annotations

import pytest
import torch
from kf_quack.ops import cross_entropy, cross_entropy_rows, rmsnorm, softmax

X = torch.zeros(4, 64, dtype=torch.bfloat16)


@pytest.mark.parametrize("call, error, message", [
    (lambda: rmsnorm([1.0]), TypeError, "x: expected a torch.Tensor"),
    (lambda: rmsnorm(torch.zeros(4, 64, dtype=torch.int32)), ValueError, "x: expected dtype bfloat16, float16"),
    (lambda: rmsnorm(torch.zeros(4, 60, dtype=torch.bfloat16)), ValueError, "N = 60 must be a positive multiple of 8"),
    (lambda: rmsnorm(torch.zeros((), dtype=torch.bfloat16)), ValueError, "x: expected at least one dimension"),
    (lambda: rmsnorm(X, torch.zeros(32)), ValueError, "weight: expected shape [64]"),
    (lambda: rmsnorm(X, torch.zeros(64), torch.zeros(4, 32)), ValueError, "residual: expected x's shape [4, 64]"),
    (lambda: rmsnorm(X, out_dtype=torch.int8), ValueError, "out_dtype: expected bfloat16, float16 or float32"),
    (lambda: rmsnorm(X, torch.zeros(64, dtype=torch.int8)), ValueError, "weight: expected dtype bfloat16"),
    (lambda: rmsnorm(X, out=torch.zeros(4, 64)), ValueError, "out: expected a torch.bfloat16 tensor of shape [4, 64]"),
    (lambda: softmax(torch.zeros(4, 12)), ValueError, "N = 12 must be a positive multiple of 8"),
    (lambda: softmax(X, out=torch.zeros(4, 64, dtype=torch.bfloat16).t()), ValueError, "out: expected a"),
    (lambda: cross_entropy(X, torch.zeros(4, dtype=torch.int64), reduction="avg"), ValueError,
     "reduction: expected one of ['none', 'sum', 'mean']"),
    (lambda: cross_entropy(X, torch.zeros(4, dtype=torch.int16)), ValueError, "target: expected an int64 or int32"),
    (lambda: cross_entropy(X, torch.zeros(5, dtype=torch.int64)), ValueError, "target: expected shape [4]"),
    (lambda: cross_entropy(X.view(2, 2, 64), torch.zeros(2, dtype=torch.int64)), ValueError,
     "x: expected logits [M, N]"),
    (lambda: cross_entropy(X, torch.zeros(4, dtype=torch.int64), ignore_index=2**40), ValueError,
     "ignore_index: expected a 32-bit integer"),
    (lambda: cross_entropy_rows(X, torch.zeros(4, dtype=torch.int64), out=torch.zeros(4)), TypeError,
     "out: expected a tuple (loss, lse)"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_a_host_tensor_is_refused_by_the_kernel_lookup():
    """Valid arguments on the CPU reach kernelforge's kernel lookup, which needs a CUDA tensor."""
    with pytest.raises(ValueError, match="x: expected a CUDA tensor"):
        softmax(X)
