"""Pure-torch reference of `quantize_columnwise` and the Hadamard transform (docs/numerics.md)."""
from __future__ import annotations

import torch

from kernelforge.limits import RHT_SIGN_MASK, RHT_SIZE
from kernelforge.testing.references import nvfp4_global_scale_ref, quantize_ref


def quantize_columnwise_ref(x: torch.Tensor, format: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Columnwise quantization: rowwise quantization of `x.T.contiguous()` (leading dims of x
    flattened to M), i.e. data [K, M*bits/8] with blocks of B consecutive rows of x."""
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    return quantize_ref(x2.t().contiguous(), format, **kwargs)


RHT_DEFAULT_SIGN_MASK = RHT_SIGN_MASK


def rht_matrix(sign_mask: int = RHT_DEFAULT_SIGN_MASK, device: torch.device | str = "cpu") -> torch.Tensor:
    """R = diag(s) * H16 / 4 (fp64): H16[i][j] = (-1)^popcount(i & j), s_i = -1 where bit i of
    the 16-bit mask is set."""
    i = torch.arange(RHT_SIZE, device=device)
    parity = torch.zeros(RHT_SIZE, RHT_SIZE, dtype=torch.int64, device=device)
    both = i.view(-1, 1) & i.view(1, -1)
    for bit in range(4):
        parity ^= (both >> bit) & 1
    h = 1.0 - 2.0 * parity.to(torch.float64)
    s = 1.0 - 2.0 * ((sign_mask >> i) & 1).to(torch.float64)
    return s.view(-1, 1) * h / 4.0


def rht_ref(x: torch.Tensor, sign_mask: int = RHT_DEFAULT_SIGN_MASK) -> torch.Tensor:
    """The transformed transpose y [N, M] (bfloat16) of x [M, N]:
    `y[n, 16c + j] = sum_i x[16c + i, n] * R[i, j]`, summed in fp64 and rounded once to bf16."""
    m, n = x.shape
    if m % RHT_SIZE or n % RHT_SIZE:
        raise ValueError(f"x: M = {m} and N = {n} must be multiples of {RHT_SIZE}")
    groups = x.to(torch.float64).t().reshape(n, m // RHT_SIZE, RHT_SIZE)
    y = groups @ rht_matrix(sign_mask, x.device)
    return y.reshape(n, m).to(torch.float32).to(torch.bfloat16)


def rht_global_scale_ref(x: torch.Tensor, sign_mask: int = RHT_DEFAULT_SIGN_MASK) -> torch.Tensor:
    """fp32 [1] calibration of the columnwise RHT output: global_scale_of_amax(amax(|rht(x)|))."""
    return nvfp4_global_scale_ref(rht_ref(x, sign_mask))


def quantize_nvfp4_rht_ref(
    x: torch.Tensor, *, global_scale_row: torch.Tensor | None = None,
    global_scale_col: torch.Tensor | None = None, sign_mask: int = RHT_DEFAULT_SIGN_MASK,
    layout: str = "swizzled",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(data, scale, data_t, scale_t): NVFP4 of x with g_row, NVFP4 of rht_ref(x) with g_col."""
    data, scale = quantize_ref(x, "nvfp4", layout=layout, global_scale=global_scale_row)
    data_t, scale_t = quantize_ref(rht_ref(x, sign_mask), "nvfp4", layout=layout, global_scale=global_scale_col)
    return data, scale, data_t, scale_t
