"""The low-precision sphere RMSNorm of Hyper-SET (energies/hyperspherical_ops.py: ``sphere_rms_norm``)."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.energies.hyperspherical_ops import sphere_rms_norm

TINY = torch.finfo(torch.float32).tiny


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_bf16_norm_is_the_float32_norm_rounded(scale):
    """Output: the float32 RMSNorm rounded once to bf16 (up to one bf16 ulp from the order of the sums)."""
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(3, 5, 48, generator=g) * scale).to(torch.bfloat16)
    u = sphere_rms_norm(z, TINY)
    ref = F.rms_norm(z.double(), (48,), eps=TINY)
    assert u.dtype == torch.bfloat16
    assert ((u.double() - ref).abs() <= 2 ** -8 * ref.abs() + 1e-30).all()
    assert torch.allclose(u.double().pow(2).mean(-1), torch.ones(3, 5, dtype=torch.float64), rtol=1e-2)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_bf16_norm_gradient_matches_float64(scale):
    g = torch.Generator().manual_seed(1)
    z64 = torch.randn(4, 7, 32, generator=g, dtype=torch.float64) * scale
    w = torch.randn(4, 7, 32, generator=g, dtype=torch.float64)  # upstream gradient
    z = z64.to(torch.bfloat16).requires_grad_(True)
    (sphere_rms_norm(z, TINY) * w.to(torch.bfloat16)).sum().backward()
    zr = z.detach().double().requires_grad_(True)  # the same (rounded) input in float64
    (F.rms_norm(zr, (32,), eps=TINY) * w.to(torch.bfloat16).double()).sum().backward()
    assert z.grad.dtype == torch.bfloat16 and torch.isfinite(z.grad).all()
    err = (z.grad.double() - zr.grad).norm() / zr.grad.norm()
    assert err < 2e-2, err


def test_bf16_norm_under_autocast_stays_bf16():
    """Under autocast F.rms_norm returns float32 (CUDA's float32 list); the sphere norm keeps z's dtype."""
    z = torch.randn(2, 3, 16).to(torch.bfloat16)
    with torch.autocast("cpu", torch.bfloat16):
        assert sphere_rms_norm(z, TINY).dtype == torch.bfloat16


def test_float32_norm_and_gradient_match_f_rms_norm():
    g = torch.Generator().manual_seed(3)
    z = (torch.randn(3, 5, 40, generator=g) * 7).requires_grad_(True)
    w = torch.randn(3, 5, 40, generator=g)
    u = sphere_rms_norm(z, TINY)
    (gz,) = torch.autograd.grad((u * w).sum(), z)
    z2 = z.detach().clone().requires_grad_(True)
    ref = F.rms_norm(z2, (40,), eps=TINY)
    (gref,) = torch.autograd.grad((ref * w).sum(), z2)
    assert u.dtype == torch.float32 and u.is_contiguous()
    torch.testing.assert_close(u, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(gz, gref, rtol=1e-5, atol=1e-6)


def test_float64_and_gains_are_f_rms_norm():
    z = torch.randn(2, 3, 16, dtype=torch.float64)
    w = torch.rand(16, dtype=torch.float64)
    assert torch.equal(sphere_rms_norm(z, TINY), F.rms_norm(z, (16,), eps=TINY))
    zb = z.to(torch.bfloat16)
    assert torch.equal(sphere_rms_norm(zb, TINY, w.to(zb.dtype)), F.rms_norm(zb, (16,), w.to(zb.dtype), TINY))


@pytest.mark.parametrize("padded", [False, True])
def test_symmetric_bisoftmax_is_the_two_softmax_reference(padded):
    """q is k: the column softmax taken as the transposed row softmax equals the computed one (float64),
    with and without key padding; a non-symmetric call still computes both."""
    from energyformer.core.attention import key_padding_mask
    from energyformer.energies.hyperspherical_ops import bisoftmax_einsum

    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    tokens = torch.ones(2, 9, dtype=torch.bool)
    tokens[1, 6:] = False
    mask = key_padding_mask(tokens) if padded else None
    fast = bisoftmax_einsum(q, q, v, 0.5, mask)
    ref = bisoftmax_einsum(q, q, v, 0.5, mask, symmetric=False)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    k = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    wrong = bisoftmax_einsum(q, k, v, 0.5, mask, symmetric=True)  # the shortcut needs S = Sᵀ
    assert not torch.allclose(bisoftmax_einsum(q, k, v, 0.5, mask), wrong)


def test_sphere_norm_traces_into_one_graph():
    """torch.compile (train.compile) takes the norm and its gradient without a graph break (Dynamo only)."""
    z = torch.randn(2, 3, 8, requires_grad=True)
    f = torch.compile(lambda t: sphere_rms_norm(t, TINY), backend="aot_eager", fullgraph=True)
    u = f(z)
    (g,) = torch.autograd.grad(u.pow(3).sum(), z)
    z2 = z.detach().requires_grad_(True)
    (g2,) = torch.autograd.grad(F.rms_norm(z2, (8,), eps=TINY).pow(3).sum(), z2)
    torch.testing.assert_close(u, F.rms_norm(z, (8,), eps=TINY), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g, g2, rtol=1e-5, atol=1e-5)
