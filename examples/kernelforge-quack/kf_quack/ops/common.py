"""What the three torch ops share: dtype names, argument checks, output buffers, and the kernel lookup
whose `KernelNotBuilt` says how to build a kernel for an N or dtype no spec file declares."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from kernelforge import extend as kf
from kernelforge.errors import KernelNotBuilt
from kernelforge.schema import ARCH_CAPABILITY

from ..family import FAMILIES

FLOAT_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
VECTOR_ELEMENTS = 8  # N is a multiple of this (the families' `n` axis): whole 16-byte rows


def float_name(t: torch.Tensor, what: str) -> str:
    """The dtype name of a bfloat16 / float16 / float32 tensor; raises naming `what` otherwise."""
    name = FLOAT_NAMES.get(t.dtype)
    if name is None:
        raise ValueError(f"{what}: expected dtype bfloat16, float16 or float32, got {t.dtype}")
    return name


def check_input(x: object, what: str = "x") -> int:
    """N (the last dimension) of a valid input; raises naming `what` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError(f"{what}: expected at least one dimension (rows of N elements)")
    n = x.shape[-1]
    if n % VECTOR_ELEMENTS or n == 0:
        raise ValueError(f"{what}: the last dimension N = {n} must be a positive multiple of {VECTOR_ELEMENTS} "
                         "(the kf_quack families are built for whole 16-byte rows)")
    return n


def rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """`t` as [M, N] rows with a contiguous last dimension (a copy only where it is strided), as quack
    hands its inputs to its kernels."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def check_same_device(x: torch.Tensor, **others: Optional[torch.Tensor]) -> None:
    for what, t in others.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{what}: expected a tensor on {x.device} (x's device), got one on {t.device}")


def output(given: Optional[torch.Tensor], what: str, shape: tuple[int, ...], dtype: torch.dtype,
           device: torch.device) -> torch.Tensor:
    """A fresh contiguous output, or the caller's `given` buffer checked against it."""
    if given is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if not isinstance(given, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(given).__name__}")
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or given.device != device:
        raise ValueError(f"{what}: expected a {dtype} tensor of shape {list(shape)} on {device}, got a "
                         f"{given.dtype} tensor of shape {list(given.shape)} on {given.device}")
    if not given.is_contiguous():
        raise ValueError(f"{what}: expected a contiguous tensor")
    return given


def traced_into(given: Optional[torch.Tensor], result: torch.Tensor) -> torch.Tensor:
    """A traced custom op's fresh result, copied into the caller's buffer where one is given (how an
    `out=` call is expressed under torch.compile)."""
    if given is None:
        return result
    given.copy_(result)
    return given


def kernel(op: str, x2: torch.Tensor, **coords: Any) -> Callable[..., Any]:
    """The prebuilt kernel of `op` for rows `x2` [M, N] at `coords` (the family's dispatch axes but
    the K-class and the arch), through kernelforge's runtime."""
    m, n = x2.shape
    try:
        return kf.kernel_for(op, x2, k=n, rows=m, row_stride=x2.stride(0) if m > 1 else n, **coords)
    except KernelNotBuilt as exc:
        capability = torch.cuda.get_device_capability(x2.device)
        arch = next((a for a, c in ARCH_CAPABILITY.items() if c == capability and a.endswith("a")), None)
        hint = None if arch is None else undeclared_hint(op, coords, arch)
        if hint is None:
            raise
        raise KernelNotBuilt(f"{exc}\n{hint}") from None


def undeclared_hint(op: str, coords: dict[str, Any], arch: str) -> Optional[str]:
    """How to build `op`'s kernel at `coords` for `arch` where no spec file of this package declares
    it (None where one does: kernelforge's message then names the `kernelforge build --only` command
    that builds it): a spec file of the user's own, and the command."""
    from kernelforge.spec import load_specs

    family = next(f for f in FAMILIES if f.name == op)
    for v in load_specs(list(family.spec_files)):
        if v.get("arch") == arch and all(str(v.get(a)) == str(value) for a, value in coords.items()):
            return None
    axes = "".join(f"{a} = [{v}]\n" if isinstance(v, int) else f'{a} = ["{v}"]\n' for a, v in coords.items())
    name = f"{op}-{'-'.join(str(v) for v in coords.values())}.toml"
    spec = (f'schema = 1\nop = "{op}"\n\n[axes]\n{axes}kclass = ["aligned"]\narch = ["{arch}"]\n\n'
            "[kclass.aligned]\nk_multiple_blocks = 1\nvector_bytes = 16\n")
    return (f"kf_quack's spec files do not declare {op} for {', '.join(f'{a}={v}' for a, v in coords.items())} "
            f"on {arch}. Write this spec file, {name}:\n\n{spec}\nand build it where CuTe-DSL and quack are "
            f"installed (add --cache DIR to build into the cache this process reads, if it is not the default):\n"
            f"    kernelforge build --spec {name} --arch {arch}")
