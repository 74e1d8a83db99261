"""The pure-torch references against independent float64 arithmetic and torch's own functions (CPU)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from kf_quack.reference import cross_entropy_ref, rmsnorm_ref, softmax_ref


def test_rmsnorm_ref_with_a_residual():
    g = torch.Generator().manual_seed(0)
    x, r, w = (torch.randn(5, 64, generator=g) for _ in range(3))
    out, res = rmsnorm_ref(x.bfloat16(), w[0], r.float(), eps=1e-5)
    h = x.bfloat16().double() + r.double()
    want = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-5) * w[0].double()
    assert out.dtype == torch.bfloat16 and res.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=0.02, rtol=0.01)
    torch.testing.assert_close(res.double(), h)
    torch.testing.assert_close(rmsnorm_ref(x, w[0], eps=1e-5)[0], F.rms_norm(x, (64,), w[0], eps=1e-5))


def test_softmax_ref_rows_sum_to_one():
    x = torch.randn(4, 4096, generator=torch.Generator().manual_seed(1)) * 10
    y = softmax_ref(x.half())
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.double().sum(-1), torch.ones(4, dtype=torch.float64), atol=5e-3, rtol=0)


def test_cross_entropy_ref_is_torchs_with_ignored_rows_zero():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 1000, generator=g) * 4
    t = torch.randint(0, 1000, (6,), generator=g)
    t[2] = -100
    loss, lse = cross_entropy_ref(x, t)
    torch.testing.assert_close(loss, F.cross_entropy(x, t, reduction="none"))
    torch.testing.assert_close(lse, torch.logsumexp(x.double(), -1).float())
    assert loss[2] == 0
