"""Every cached build, including the candidates the runtime does not pick on this GPU, on the GPU.

The other GPU tests go through the public functions, which run the build that the tuning table
(or the heuristic) picks. A different GPU or table may pick any other candidate, so each build
is also called directly here on fresh random inputs into poisoned buffers and compared with the
reference: quantize bit for bit, the fused ops within the docs/numerics.md tolerance.
"""
from __future__ import annotations

import pytest
import torch

from kernelforge.formats import FORMATS
from kernelforge.ops import checks, launch
from kernelforge.runtime.arch import arch_runs_on
from kernelforge.testing.references import quantize_ref
from kernelforge.tuner.measure import problem_k
from kernelforge.validation.fused_checks import Tally, compare_fused, reference

pytestmark = pytest.mark.gpu
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
M = 129  # one partial 128-row tile of swizzled scales


def _builds(op: str):
    table = launch.dispatch_table()
    cap = torch.cuda.get_device_capability()
    out = []
    for group, cands in sorted(table.groups().items()):
        if group.split("|", 1)[0] != op:
            continue
        out.extend((c, table.load(c)) for c in cands if arch_runs_on(c.arch, cap))
    assert out, f"no {op} builds for this GPU in the cache"
    return out


def _buffers(coords, m, k, poison):
    fmt = FORMATS[coords["format"]]
    d_shape, s_shape = checks.output_shapes(fmt, (m, k), m, coords["layout"])
    data = poison(torch.empty(d_shape, dtype=getattr(torch, fmt.data_dtype), device="cuda"))
    scale = poison(torch.empty(s_shape, dtype=getattr(torch, fmt.scale_dtype), device="cuda"))
    g = (torch.rand(1, device="cuda") * 1000 + 1) if fmt.has_global_scale else None
    return fmt, data, scale, g


def test_every_quantize_build(poison):
    n = 0
    for cand, fn in _builds("quantize"):
        coords = cand.entry["extra"]["dispatch"]
        fmt, data, scale, g = _buffers(coords, M, problem_k("quantize", cand, FORMATS[coords["format"]].block), poison)
        k = problem_k("quantize", cand, fmt.block)
        x = (torch.randn(M, k, device="cuda") * torch.exp2(torch.randint(-8, 8, (M, 1), device="cuda").float()))
        x = x.to(DTYPES[coords["dtype"]])
        fn(x, data, scale, g)
        rd, rs = quantize_ref(x.cpu(), fmt.name, layout=coords["layout"],
                              scale_mode=coords["scale_mode"] if coords["scale_mode"] != "none" else "floor",
                              global_scale=None if g is None else g.cpu())
        name = cand.entry["name"]
        assert torch.equal(scale.view(torch.uint8).cpu(), rs), f"{name}: scale bytes differ from the reference"
        assert torch.equal(data.view(torch.uint8).cpu(), rd), f"{name}: data bytes differ from the reference"
        n += 1
    assert n >= 2


def test_every_fused_build(poison):
    tally = Tally()
    n = 0
    for cand, fn in _builds("rmsnorm_quantize"):
        coords = cand.entry["extra"]["dispatch"]
        h = cand.kclass.max_k
        fmt, data, scale, g = _buffers(coords, M, h, poison)
        dtype = DTYPES[coords["dtype"]]
        x = (torch.randn(M, h, device="cuda") * torch.exp2(torch.randint(-6, 6, (M, 1), device="cuda").float())).to(dtype)
        w = (torch.rand(h, device="cuda") * 2 - 0.5).to(dtype)
        r = torch.randn(M, h, device="cuda", dtype=dtype) if coords["residual"] == "add" else None
        r_before = None if r is None else r.clone()
        fn(x, r, w, data, scale, g, 1e-6)
        hsum, rd, rs = reference(x, r_before, w, fmt.name, coords["scale_mode"], coords["layout"], g, 1e-6)
        name = cand.entry["name"]
        if r is not None:
            assert torch.equal(r.view(torch.int16), hsum.view(torch.int16)), f"{name}: residual != dtype(x + residual)"
        compare_fused(data, scale, rd, rs, fmt.name, coords["layout"], M, h,
                      torch.ones(M, dtype=torch.bool, device="cuda"), name, tally)
        n += 1
    tally.check()
    assert n >= 2
