"""Inputs for tests, benchmarks and `kernelforge tune`: poisoned outputs and
fresh inputs rotated beyond the L2 cache (so a timed call reads DRAM, as in a model)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from kernelforge.formats import FORMATS
from kernelforge.ops.checks import output_shapes

POISON_BYTE = 0xA5  # a recognisable non-zero pattern: unwritten output bytes show up


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill `t`'s bytes with POISON_BYTE (in place) and return it."""
    t.view(torch.uint8).fill_(POISON_BYTE)
    return t


@dataclass
class RotatingInputs:
    """Outputs for one quantizing call and `count` fresh inputs of `shape`, together beyond 4x L2."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    count: int
    data: torch.Tensor
    scale: torch.Tensor
    global_scale: torch.Tensor | None

    def like(self, shape: tuple[int, ...]) -> torch.Tensor:
        """One fresh normal tensor of `shape` in the input dtype."""
        return torch.randn(*shape, device="cuda").to(self.dtype)

    def inputs(self) -> list[torch.Tensor]:
        return [self.like(self.shape) for _ in range(self.count)]


def rotating_inputs(coords: dict[str, Any], m: int, k: int, l2_bytes: int, inputs_per_call: int = 1,
                    row_elements: int | None = None) -> RotatingInputs:
    """Rotating fresh [m, row_elements or k] inputs of coords' dtype for a quantizing op at
    `coords` (format, layout, dtype), with one set of [m, k] outputs: enough inputs (at most 32)
    that `inputs_per_call` of them per call span at least 4x the L2 cache."""
    fmt = FORMATS[coords["format"]]
    dtype = getattr(torch, coords["dtype"])
    d_shape, s_shape = output_shapes(fmt, (m, k), m, coords["layout"])
    data = torch.empty(d_shape, dtype=getattr(torch, fmt.data_dtype), device="cuda")
    scale = torch.empty(s_shape, dtype=getattr(torch, fmt.scale_dtype), device="cuda")
    g = torch.ones(1, dtype=torch.float32, device="cuda") if fmt.has_global_scale else None
    cols = row_elements or k
    per_call = m * cols * dtype.itemsize * inputs_per_call
    n = max(1, min(32, math.ceil(4 * l2_bytes / per_call)))
    return RotatingInputs(dtype, (m, cols), n, data, scale, g)
