"""core/precond.py: the preconditioners against their dense matrices written out (CEM seed Eq. 13)."""

import math

import pytest
import torch
import torch.nn.functional as F

from energyformer.core import make_preconditioner


def dense(P) -> torch.Tensor:
    """diag(softplus(√D p)) + U Vᵀ + V Uᵀ from the parameters, ([H,] D, D)."""
    d = torch.diag_embed(F.softplus(math.sqrt(P.dim) * P.p))
    if hasattr(P, "U"):
        d = d + P.U @ P.V.mT + P.V @ P.U.mT
    return d


def randomised(kind: str, heads, dim=12, rank=4):
    kw = {"rank": rank} if kind == "diag_low_rank" else {}
    P = make_preconditioner(kind, dim, heads=heads, **kw).double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in P.parameters():  # away from the initialisation (V = 0 there)
            prm.copy_(torch.randn(prm.shape, generator=g, dtype=prm.dtype) * 0.3)
    return P


@pytest.mark.parametrize("kind", ["diagonal", "diag_low_rank"])
@pytest.mark.parametrize("heads", [None, 3])
def test_application_is_the_dense_matrix(kind, heads):
    P = randomised(kind, heads)
    lead = (2, 5) + (() if heads is None else (heads,))
    g = torch.randn(*lead, P.dim, dtype=torch.float64)
    M = dense(P)  # ([H,] D, D)
    want = torch.einsum("...ij,...j->...i", M, g)
    torch.testing.assert_close(P(g), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(P.matrix(), M, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("heads", [None, 3])
def test_low_rank_gradients(heads):
    P = randomised("diag_low_rank", heads, dim=6, rank=2)
    g = torch.randn(4, *(() if heads is None else (heads,)), 6, dtype=torch.float64, requires_grad=True)

    # gradients through the parameters: compare with the dense matrix's autograd
    out = P(g)
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum(), [g, P.p, P.U, P.V])
    ref = torch.autograd.grad((torch.einsum("...ij,...j->...i", dense(P), g) * w).sum(), [g, P.p, P.U, P.V])
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_bf16_autocast_stays_within_bf16_error(scale):
    """Under bf16 autocast the products run in bf16: the result stays within bf16 rounding of float64's, at small
    and large magnitudes, and keeps the input's dtype (float32 in, float32 out)."""
    P = randomised("diag_low_rank", 3).float()
    g = torch.randn(2, 7, 3, P.dim) * scale
    with torch.autocast("cpu", torch.bfloat16):
        out = P(g)
    want = P.double()(g.double())
    assert out.dtype == torch.float32
    err = (out.double() - want).abs().max() / want.abs().max()
    assert err < 2e-2, err
