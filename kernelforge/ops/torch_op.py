"""An eager function and its `torch.library` custom op side by side (quack's `cute_op` pattern).

Every kernelforge op, built in or from a plugin, is a `TorchOp`: calling it runs the eager
function directly (the dispatcher round trip adds host time to every call; docs/performance.md),
and while torch.compile traces it, the registered custom op, whose fake implementation gives
exact output shapes and dtypes so that `fullgraph=True` traces through it.

Registration happens at import, so it is on every process's startup path. Every op is
registered with the `torch.library.Library` calls that `torch.library.custom_op` makes for it
(the same schema, tags, backend, fake, autograd and, for an op that mutates arguments,
ADInplaceOrView kernels), except that its autograd kernel (torch's own, `make_autograd_impl`)
is built on its first use: building it creates a class per op, a large share of `custom_op`'s
cost (docs/performance.md; `benchmarks/diag.py registration` times the registration calls).
tests/ops/test_torch_op.py compares both registrations, kernel by dispatch key.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import torch

_libraries: dict[str, torch.library.Library] = {}  # one fragment per namespace, alive for the process


def _library(namespace: str) -> torch.library.Library:
    lib = _libraries.get(namespace)
    if lib is None:
        lib = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return lib


class _NoBackward:
    """What torch's autograd kernel of a custom op reads when no backward is registered: a
    backward through the op raises "no autograd formula was registered", as for custom_op."""

    _backward_fn = None
    _setup_context_fn = None


class TorchOp:
    """`eager` registered as the custom op `qualname` ("namespace::name") with `fake`.

    `op(...)` calls `eager` in eager mode and the custom op under torch.compile; `op.custom`
    is the custom op itself (also `torch.ops.<namespace>.<name>`). `eager`'s annotations are
    the op's schema (torch.library.custom_op's rules: tensors, scalars, str, Optional of them,
    tuples of tensors as results); `mutates_args` names the tensors it writes in place.

    `schema`, when given, is that schema written out: exactly what
    `torch.library.infer_schema(eager, mutates_args=mutates_args)` returns. Inferring it costs
    import time at every process start (docs/performance.md), so the built-in ops give it;
    tests/ops/test_torch_op.py checks each given schema against the inferred one.
    """

    def __init__(self, qualname: str, eager: Callable[..., Any], *, fake: Callable[..., Any],
                 mutates_args: Iterable[str] = (), schema: Optional[str] = None) -> None:
        namespace, sep, name = qualname.partition("::")
        if not sep or not namespace or not name:
            raise ValueError(f"qualname: expected 'namespace::name', got {qualname!r}")
        self.qualname = qualname
        self.eager = eager
        self.mutates_args = tuple(mutates_args)
        self.schema_given = schema is not None
        if schema is None:
            schema = torch.library.infer_schema(eager, mutates_args=self.mutates_args)
        self.schema = schema
        self.custom = self._register(namespace, name, fake)
        functools.update_wrapper(self, eager)

    def _register(self, namespace: str, name: str, fake: Callable[..., Any]) -> Any:
        """Register `eager` as namespace::name; return its op packet."""
        lib = _library(namespace)
        lib.define(name + self.schema, tags=(torch.Tag.pt2_compliant_tag,))
        lib.impl(name, self.eager, "CompositeExplicitAutograd")
        packet = getattr(getattr(torch.ops, namespace), name)
        if self.mutates_args:
            _register_version_bump(lib, self.qualname, name, packet.default)
        built: list[Callable[..., Any]] = []

        def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            if not built:
                from torch._library.autograd import make_autograd_impl

                built.append(make_autograd_impl(packet.default, _NoBackward()))
            return built[0](keyset, *args, **kwargs)

        lib.impl(name, autograd_kernel, "Autograd", with_keyset=True)
        _register_fake(lib, self.qualname, fake)
        return packet

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return self.custom(*args, **kwargs)
        return self.eager(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<kernelforge op {self.qualname}>"


def _register_version_bump(lib: torch.library.Library, qualname: str, name: str, op: Any) -> None:
    """The ADInplaceOrView kernel `custom_op` gives an op that mutates arguments: it bumps the
    version counter of each tensor the op writes (so autograd notices the in-place change), then
    continues to the ADInplaceOrView fallback it registers first."""
    lib.m.register_ad_inplace_or_view_fallback(name)
    fallback = torch._C._dispatch_get_computed_kernel_for_dispatch_key(qualname, "ADInplaceOrView")
    written = [(i, a.name) for i, a in enumerate(op._schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]

    def bump_versions(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        for i, arg_name in written:
            tensor = args[i] if i < len(args) else kwargs.get(arg_name)
            if tensor is not None:
                torch.autograd.graph.increment_version(tensor)
        return fallback.call_boxed(keyset, *args, **kwargs)

    with warnings.catch_warnings():  # torch warns once when any op gets an ADInplaceOrView kernel
        warnings.filterwarnings("ignore", message="Warning only once for all operators", category=UserWarning)
        lib.impl(name, bump_versions, "ADInplaceOrView", with_keyset=True)


def _register_fake(lib: torch.library.Library, qualname: str, fake: Callable[..., Any]) -> None:
    """`torch.library.register_fake(qualname, fake, lib=lib)` without its caller lookup: that one
    reads the calling frame's source file and scans sys.modules for its module (inspect
    getframeinfo/getmodule, paid at every `import kernelforge.ops`), only to
    name the caller in messages. The fake implementation is registered in torch's registry as
    register_fake does it, with the function's own file and line as its source; where that
    registry is not there in this form, through register_fake itself."""
    code = getattr(fake, "__code__", None)
    source = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else qualname
    try:
        from torch._library.simple_registry import singleton

        holder = singleton.find(qualname).fake_impl
        handle = holder.register(fake, source, lib)
    except (ImportError, AttributeError, TypeError):
        torch.library.register_fake(qualname, fake, lib=lib)
        return
    lib._registration_handles.append(handle)


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
