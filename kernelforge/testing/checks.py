"""Byte-exact comparison of quantized outputs with the docs/numerics.md reference (GPU tests)."""
from __future__ import annotations

import torch

from kernelforge.formats import FORMATS
from kernelforge.testing.references import quantize_ref


def op_kwargs(mode: str, layout: str, g=None) -> dict:
    """Keyword arguments of a quantizing op: layout, the scale mode unless "none", the global scale if any."""
    kw = {"layout": layout}
    if mode != "none":
        kw["scale_mode"] = mode
    if g is not None:
        kw["global_scale"] = g
    return kw


def random_input(m: int, k: int, dtype: torch.dtype, device: str = "cuda") -> torch.Tensor:
    """Log-uniform magnitudes over many binades, random signs, a random gain per row and column:
    every scale value shows up along both dimensions."""
    mag = torch.exp2(torch.empty(m, k, device=device).uniform_(-12, 12))
    gain = torch.exp2(torch.randint(-16, 16, (m, 1), device=device).float()
                      + torch.randint(-8, 8, (1, k), device=device).float())
    sign = torch.where(torch.rand(m, k, device=device) < 0.5, -1.0, 1.0)
    return (mag * sign * gain).to(dtype)


def assert_matches(data: torch.Tensor, scale: torch.Tensor, xq: torch.Tensor, fmt: str, mode: str,
                   layout: str, g=None, what: str = "") -> None:
    """`(data, scale)` equal rowwise quantization of the 2-D `xq` byte for byte (scale padding
    included); element bytes of NaN/Inf blocks are unspecified and masked."""
    xc = xq.cpu()
    rd, rs = quantize_ref(xc, fmt, layout=layout, scale_mode=mode if mode != "none" else "floor",
                          global_scale=None if g is None else g.cpu())
    got_s = scale.view(torch.uint8).cpu()
    assert got_s.shape == rs.shape, f"{what}: scale shape {tuple(got_s.shape)} != {tuple(rs.shape)}"
    bad = (got_s != rs).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} scale bytes differ, first at {bad[:4].tolist()}"
    f = FORMATS[fmt]
    m, k = xc.shape
    got_d = data.view(torch.uint8).reshape(rd.shape).cpu()
    finite = torch.isfinite(xc.float().reshape(m, k // f.block, f.block)).all(-1)
    mask = finite.repeat_interleave(f.block * f.element_bits // 8, dim=1)
    bad = ((got_d != rd) & mask).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} data bytes differ, first at {bad[:4].tolist()}"


def forbidding_checked_path(monkeypatch):
    """A context-manager factory in which the ops' checked (validating) path raises: calls made
    inside it prove that the out= fast path served them."""
    from contextlib import contextmanager

    from kernelforge.ops import checks

    @contextmanager
    def forbidden():
        with monkeypatch.context() as mp:
            def no_checks(*args, **kwargs):
                raise AssertionError("the checked path ran")
            mp.setattr(checks, "output_buffers", no_checks)
            mp.setattr(checks, "output_pairs", no_checks)
            yield
    return forbidden
