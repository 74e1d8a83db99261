"""`cross_entropy`: quack's cross-entropy forward (`quack.cross_entropy.cross_entropy`, no autograd) on
the prebuilt kernels."""
from __future__ import annotations

from typing import Optional, Union

import torch

from kernelforge import extend as kf

from ..family import CROSS_ENTROPY
from .common import check_input, check_same_device, float_name, kernel, output

TARGET_NAMES = {torch.int64: "int64", torch.int32: "int32"}
REDUCTIONS = ("none", "sum", "mean")
INT32 = (-(2**31), 2**31 - 1)  # the kernel's ignore_index is an Int32


def cross_entropy(x: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100, reduction: str = "mean",
                  return_lse: bool = False) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Cross-entropy of logits x [M, N] against class indices target [M], computed by quack's kernel:
    per row `loss = logsumexp(x) - x[target]` (0 where target == ignore_index) in fp32, then
    `reduction` as `quack.cross_entropy` applies it ("none": [M]; "sum"; "mean": over the rows
    not ignored). `return_lse=True` also returns the per-row log-sum-exp [M] (fp32).

    x: bfloat16 / float32 CUDA tensor [M, N], N a multiple of 8; target int64 or int32 on x's
    device. Under torch.compile this is the `kf_quack::cross_entropy` custom op (per-row loss and
    log-sum-exp; the reduction is traced as torch ops).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction: expected one of {list(REDUCTIONS)}, got {reduction!r}")
    if torch.compiler.is_compiling():
        loss, lse = cross_entropy_op.custom(x, target, ignore_index)
    else:
        loss, lse = cross_entropy_rows(x, target, ignore_index=ignore_index)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / (target != ignore_index).sum().float()
    return (loss, lse) if return_lse else loss


def cross_entropy_rows(x: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                       out: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (loss, lse), each fp32 [M], of `cross_entropy` (quack's `cross_entropy_fwd` with
    `return_lse=True`); `out=(loss, lse)` writes into caller buffers."""
    n = check_input(x)
    if x.dim() != 2:
        raise ValueError(f"x: expected logits [M, N], got shape {list(x.shape)}")
    if x.stride(-1) != 1:
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    dtype = float_name(x, "x")
    if not isinstance(target, torch.Tensor) or target.dtype not in TARGET_NAMES:
        got = target.dtype if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"target: expected an int64 or int32 tensor, got {got}")
    if target.shape != x.shape[:1]:
        raise ValueError(f"target: expected shape [{x.shape[0]}] (one class per row of x), got {list(target.shape)}")
    if not INT32[0] <= ignore_index <= INT32[1]:
        raise ValueError(f"ignore_index: expected a 32-bit integer, got {ignore_index}")
    check_same_device(x, target=target)
    m = x.shape[0]
    if out is not None and (not isinstance(out, tuple) or len(out) != 2):
        raise TypeError("out: expected a tuple (loss, lse) of two tensors")
    loss = output(None if out is None else out[0], "out[0] (loss)", (m,), torch.float32, x.device)
    lse = output(None if out is None else out[1], "out[1] (lse)", (m,), torch.float32, x.device)
    if m:
        fn = kernel(CROSS_ENTROPY, x, dtype=dtype, target_dtype=TARGET_NAMES[target.dtype], n=n)
        fn(x, target, None, loss, lse, None, None, ignore_index)
    return loss, lse


def _fake(x: torch.Tensor, target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.shape[0]
    return x.new_empty((m,), dtype=torch.float32), x.new_empty((m,), dtype=torch.float32)


@kf.torch_op("kf_quack::cross_entropy", fake=_fake)
def cross_entropy_op(x: torch.Tensor, target: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (loss, lse) of `cross_entropy` into fresh outputs."""
    return cross_entropy_rows(x, target, ignore_index=ignore_index)
