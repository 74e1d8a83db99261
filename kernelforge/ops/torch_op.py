"""An eager function and its `torch.library` custom op side by side (quack's `cute_op` pattern).

Every kernelforge op, built in or from a plugin, is a `TorchOp`: calling it runs the eager
function directly (the dispatcher round trip costs microseconds per call; benchmarks/RESULTS.md),
and while torch.compile traces it, the registered custom op, whose fake implementation gives
exact output shapes and dtypes so that `fullgraph=True` traces through it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import torch


class TorchOp:
    """`eager` registered as the custom op `qualname` ("namespace::name") with `fake`.

    `op(...)` calls `eager` in eager mode and the custom op under torch.compile; `op.custom`
    is the custom op itself (also `torch.ops.<namespace>.<name>`). `eager`'s annotations are
    the op's schema (torch.library.custom_op's rules: tensors, scalars, str, Optional of them,
    tuples of tensors as results); `mutates_args` names the tensors it writes in place.
    """

    def __init__(self, qualname: str, eager: Callable[..., Any], *, fake: Callable[..., Any],
                 mutates_args: Iterable[str] = ()) -> None:
        namespace, sep, name = qualname.partition("::")
        if not sep or not namespace or not name:
            raise ValueError(f"qualname: expected 'namespace::name', got {qualname!r}")
        self.qualname = qualname
        self.eager = eager
        self.custom = torch.library.custom_op(qualname, eager, mutates_args=tuple(mutates_args))
        self.custom.register_fake(fake)
        functools.update_wrapper(self, eager)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return self.custom(*args, **kwargs)
        return self.eager(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kernelforge op {self.qualname}>"


def torch_op(qualname: str, *, fake: Callable[..., Any],
             mutates_args: Iterable[str] = ()) -> Callable[[Callable[..., Any]], TorchOp]:
    """Decorator: `@torch_op("ns::name", fake=shapes)` makes the function a `TorchOp`."""
    def wrap(eager: Callable[..., Any]) -> TorchOp:
        return TorchOp(qualname, eager, fake=fake, mutates_args=mutates_args)
    return wrap


def copy_into(out: Optional[Sequence[torch.Tensor]], results: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A traced op's results, copied into the caller's `out` buffers where given (any of which may
    be a uint8 buffer of the format's bytes): how an `out=` call is expressed under torch.compile,
    whose custom ops return fresh tensors."""
    if out is None:
        return tuple(results)
    for dst, src in zip(out, results):
        dst.copy_(src if dst.dtype == src.dtype else src.view(dst.dtype))
    return tuple(out)
