"""What one of quack's compile functions compiles: its kernel object and its fake arguments.

quack compiles each kernel in one function (`quack.rmsnorm._compile_rmsnorm_fwd`,
`quack.softmax.Softmax.compile`, `quack.cross_entropy.CrossEntropy.compile`): from dtypes, N and
flags it builds the kernel object and fake tensors (symbolic batch size, 16-byte vectors) and
calls `cute.compile(kernel, *fakes, fake_stream, options="--enable-tvm-ffi")`, behind its
`jit_cache` decorator (an in-memory and an on-disk `.o` cache). `compiled_by(fn, *args)` runs that
function itself, undecorated, with `cute.compile` replaced by a recorder for this one call: the
kernel and fakes handed to kernelforge's compile are exactly the objects quack would compile,
and nothing of quack's is re-implemented here. Build time only (imports cutlass).
"""
from __future__ import annotations

import types
from typing import Any, Callable, NamedTuple

import cutlass.cute as cute

from kernelforge.build import toolchain_fingerprint


class Compiled(NamedTuple):
    """The arguments of the `cute.compile` call a quack compile function makes."""

    kernel: object
    args: list[object]
    options: str


class _Recorder(types.ModuleType):
    """`cutlass.cute` as seen by one quack compile function: every name is cutlass.cute's, but
    `compile` records its arguments instead of compiling."""

    def __init__(self) -> None:
        super().__init__(cute.__name__)
        self.calls: list[Compiled] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(cute, name)

    def compile(self, kernel: object, *args: object, options: str = "") -> None:
        self.calls.append(Compiled(kernel, list(args), options))


def compiled_by(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Compiled:
    """The kernel and fake arguments `fn(*args, **kwargs)` would compile, `fn` being a quack compile
    function (its `jit_cache` wrapper or the function itself; neither cache is read or written).

    Raises RuntimeError unless `fn` makes exactly one `cute.compile` call, and when quack asks for a
    compile option kernelforge's own compile does not pass (the code would then differ from quack's).
    """
    raw = getattr(fn, "__wrapped__", fn)
    if "cute" not in raw.__code__.co_names:
        raise RuntimeError(f"{raw.__qualname__} does not call cute.compile through the name `cute`")
    recorder = _Recorder()
    run = types.FunctionType(raw.__code__, {**raw.__globals__, "cute": recorder}, raw.__name__,
                             raw.__defaults__, raw.__closure__)
    run.__kwdefaults__ = raw.__kwdefaults__
    run(*args, **kwargs)
    if len(recorder.calls) != 1:
        raise RuntimeError(f"{raw.__qualname__} called cute.compile {len(recorder.calls)} times, expected once")
    call = recorder.calls[0]
    ours = toolchain_fingerprint()["compile_options"]
    extra = sorted(set(_options(call.options).items()) - set(_options(ours).items()))
    if extra:
        raise RuntimeError(f"{raw.__qualname__} compiles with {call.options!r}, which kernelforge's compile "
                           f"({ours!r}, plus the variant's --gpu-arch) does not pass: {extra}")
    return call


def _options(text: str) -> dict[str, str]:
    """`--flag value` / `--flag` pairs of a CuTe-DSL options string."""
    words, out = text.split(), {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            out[word] = "" if nxt.startswith("--") else nxt
    return out
