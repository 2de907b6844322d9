"""MHA2nd / MHA2nd1st output pseudo-inverse: the ridge ε is relative to each head's scale and is a
config key (issue 23: an absolute ε = 1e-6 gave 1.2e-3 relative error at D 8, weight std 0.02)."""

import pytest
import torch

from energyformer.blocks.intrinsic_newton import build_mha2nd, build_mha2nd1st, MHA2ndConfig, MHA2nd1stConfig
from energyformer.blocks.registry import SublayerSpec
from energyformer.core import IdentityPrecond
from energyformer.energies.newton import NewtonHeads


def _pinv_error(e: NewtonHeads) -> float:
    P = e.wq.weight.detach().double().view(e.heads, e.head_dim, e.dim)
    want = torch.linalg.pinv(P).transpose(-1, -2).reshape(e.heads * e.head_dim, e.dim)  # (P_h^+)^T stacked
    got = e.pinv_rows().detach().double()
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("dim,heads", [(8, 2), (128, 4)])
@pytest.mark.parametrize("std", [0.02, 1.0, 100.0])
def test_pinv_is_accurate_at_every_weight_scale(dim, heads, std):
    torch.manual_seed(0)
    e = NewtonHeads(dim, heads)
    with torch.no_grad():
        e.wq.weight.normal_(0, std)
    assert _pinv_error(e) < 1e-5  # float32 (absolute eps = 1e-6: 2e-3 at D 8, std 0.02)
    assert _pinv_error(e.double()) < 1e-12


def test_pinv_eps_is_relative_and_a_config_key():
    spec = SublayerSpec(dim=8, heads=2)
    e = build_mha2nd1st(MHA2nd1stConfig(pinv_eps=1e-3), spec).energy
    assert e.pinv_eps == 1e-3 and build_mha2nd(MHA2ndConfig(pinv_eps=0.0), spec).energy.pinv_eps == 0.0
    e = e.double()
    errs = []
    for std in (1e-3, 1.0, 1e3):  # the same relative bias at any scale of W_Q
        torch.manual_seed(1)
        with torch.no_grad():
            e.wq.weight.normal_(0, std)
        errs.append(_pinv_error(e))
    assert 1e-6 < errs[0] and max(errs) / min(errs) < 1.0 + 1e-6


def test_pinv_rows_follow_the_ridge_formula_at_a_large_eps():
    """(P_h P_hᵀ + ε_h I)⁻¹ P_h with ε_h = pinv_eps · tr(P_h P_hᵀ)/d_h, written out, at pinv_eps = 0.1 (where the
    ridge changes the rows: at the default machine epsilon a wrong scale hides below the tests' tolerance)."""
    torch.manual_seed(0)
    e = NewtonHeads(8, 2, pinv_eps=0.1).double()
    P = e.wq.weight.detach().view(2, 4, 8)
    G = P @ P.transpose(-1, -2)
    eps = 0.1 * torch.einsum("hii->h", G) / 4
    want = torch.linalg.solve(G + eps[:, None, None] * torch.eye(4, dtype=G.dtype), P).reshape(8, 8)
    torch.testing.assert_close(e.pinv_rows().detach(), want, rtol=1e-12, atol=1e-12)
    assert float((want - torch.linalg.pinv(P).transpose(-1, -2).reshape(8, 8)).abs().max()) > 1e-2  # it matters


@pytest.mark.parametrize("kind,want", [("clamp", [0.1, 0.1, 1.0]), ("abs", [0.1, 0.1, 1.0]),
                                       ("add", [0.08, 0.11, 1.1])])
def test_damping_gives_the_documented_eigenvalues(kind, want):
    """``damp``: eigenvalues (1, 0.01, −0.02) become max(λ, ε) ('clamp'), max(|λ|, ε) ('abs', saddle-free) or λ + ε
    ('add') at ε = 0.1."""
    from energyformer.energies.newton import damp

    q = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    M = q @ torch.diag(torch.tensor([1.0, 0.01, -0.02], dtype=torch.float64)) @ q.T
    got = torch.linalg.eigvalsh(damp(0.5 * (M + M.T), kind, 0.1))
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


def test_pinv_of_a_zero_head_is_zero_not_nan():
    e = NewtonHeads(8, 2)
    with torch.no_grad():
        e.wq.weight.zero_()
    assert torch.equal(e.pinv_rows(), torch.zeros(8, 8))


# ----------------------------------------------------------------------------- the Taylor bias (issue 23)
def _direct_bias(p, v, mu, a):
    """C a by the unshifted formula Σ_j p_ij (v_j·a_i) v_j − (μ_i·a_i) μ_i (float64 here)."""
    return (p * (a @ v.transpose(-1, -2))) @ v - (mu * a).sum(-1, keepdim=True) * mu


@pytest.mark.parametrize("dropped", [False, True])
def test_taylor_bias_equals_the_unshifted_formula(dropped):
    torch.manual_seed(0)
    e = NewtonHeads(16, 2, mode="taylor").double()
    p = torch.softmax(torch.randn(2, 2, 5, 7, dtype=torch.float64) * 3, -1)
    if dropped:  # dropped-out weights, rescaled: rows no longer sum to one
        e.train()
        e.dropout = 0.3
        p = p * (torch.rand_like(p) > 0.3) / 0.7
    v, a = torch.randn(2, 2, 7, 8, dtype=torch.float64), torch.randn(2, 2, 5, 8, dtype=torch.float64)
    mu = p @ v
    torch.testing.assert_close(e._taylor_bias(p, v, mu, a), _direct_bias(p, v, mu, a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("peak", [1e8, 7.0])
def test_taylor_bias_has_no_cancellation_when_values_share_a_large_mean(peak):
    """C a is a covariance: values v_j = 1e3·m + O(1) with a peaked p. The unshifted float32 formula
    cancels two terms of size |v|²|a| (at peak 7 it fails this check; peak 1e8 is one key per query, the
    scale fuzz's weights x1e4, where the bias is 0); shifted per query it stays within float32."""
    torch.manual_seed(1)
    e = NewtonHeads(16, 2, mode="taylor").eval()
    m = torch.randn(8, dtype=torch.float64)
    v = (1e3 * m + torch.randn(1, 2, 7, 8, dtype=torch.float64)).float().double()
    a = torch.randn(1, 2, 5, 8, dtype=torch.float64).float().double()
    p = torch.softmax(peak * torch.randn(1, 2, 5, 7, dtype=torch.float64), -1).float().double()
    c = p @ v  # float64 reference: the explicit centred covariance
    want = ((v[:, :, None] - c[..., None, :]) * p[..., None]).transpose(-1, -2) @ (
        (v[:, :, None] - c[..., None, :]) @ a[..., None])
    got = e._taylor_bias(p.float(), v.float(), (p.float() @ v.float()), a.float()).double()
    scale = float(a.norm(dim=-1).max() * (v - c[..., :1, :]).norm(dim=-1).max() ** 2)  # |a| |v − μ|²
    assert float((got - want[..., 0]).abs().max()) <= 1e-4 * max(float(want.abs().max()), 1e-3 * scale)


# ----------------------------------------------------------------------------- float32 gradients (MHA2nd)
@pytest.mark.parametrize("kind,bounds", [("mha2nd", (1e-5, 3e-3, 1e-4)), ("mha2nd1st", (1e-3, 1e-3, 1e-3))])
def test_float32_gradients_follow_float64_where_attention_is_peaked(kind, bounds):
    """Weights x10 (logits in the hundreds), key padding, causal: float32 backward against float64 (x, W_K, the
    score temperature). MHA2nd's uncentred covariance Σ p v vᵀ − μ μᵀ put W_K's gradient 16 % off and the score
    temperature's 200 % (sign flipped) where float64 moves 4e-5 under float32-sized perturbations; centred on
    each query's heaviest value, with the scores shifted by their row maximum before T_s, they follow float64.
    MHA2nd1st is worse conditioned here (float64 moves 4e-4 under those perturbations): its bound is that."""
    import copy

    import energyformer.blocks  # noqa: F401  (registers the attention kinds)
    from energyformer.blocks.registry import ATTENTIONS
    from energyformer.core import ForwardContext

    entry = ATTENTIONS.get(kind)
    torch.manual_seed(0)
    blk = entry.builder(entry.config(), SublayerSpec(dim=16, heads=2, causal=True)).double().train()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in blk.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            if p.dim() >= 2:
                p.mul_(10.0)
    x0 = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    mask[1, 2] = False
    w = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    def grads(b, dtype):
        x = x0.to(dtype).clone().requires_grad_(True)
        y = b(x, ForwardContext(mask=mask, embedded=x))
        (y * w.to(dtype) * mask[..., None]).sum().backward()
        return {"x": x.grad.double(), **{n: p.grad.double() for n, p in b.named_parameters() if p.grad is not None}}

    want, got = grads(blk, torch.float64), grads(copy.deepcopy(blk).float(), torch.float32)
    err = {n: float((got[n] - want[n]).norm() / want[n].norm()) for n in ("x", "energy.wk.weight",
                                                                        "energy.temp_score.theta")}
    assert [err[n] < b for n, b in zip(("x", "energy.wk.weight", "energy.temp_score.theta"), bounds)] == [True] * 3, err


@pytest.mark.parametrize("kind", ["clamp", "abs"])
def test_damping_a_matrix_that_is_not_finite_names_it(kind):
    """Probe AS: NaN weights in MHA2nd ended in ``linalg.eigh: ... failed to converge``, which named neither the
    matrix nor NaN; now a NonFiniteOutput says what is not finite (a finite matrix damps as before)."""
    from energyformer.energies.newton import damp
    from energyformer.errors import NonFiniteOutput

    M = torch.eye(3, dtype=torch.float64).expand(2, 3, 3).clone()
    M[1, 0, 2] = M[1, 2, 0] = float("nan")
    with pytest.raises(NonFiniteOutput, match=r"MHA2nd's Newton matrix I - C/T is not finite"):
        damp(M, kind, 0.1)
    assert torch.equal(damp(M[:1], kind, 0.1), M[:1])


@pytest.mark.parametrize("fp32_heads", [True, False])
def test_projections_run_in_float32_under_autocast_with_fp32_heads(fp32_heads):
    """``NewtonHeads._project``: under bf16 autocast q, k, v and the queries at a new point are float32 with
    ``fp32_heads`` (their scores cancel terms of size |k|²: probe AU), bf16 without it (probe AV: nothing held the
    k and new-point projections)."""
    e = NewtonHeads(16, 2, tie_values=False, fp32_heads=fp32_heads)
    h = torch.randn(2, 5, 16)
    want = torch.float32 if fp32_heads else torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        st = e.prepare(h)
        assert {st.q.dtype, st.k.dtype, st.v.dtype, e.queries(h + 1, st).dtype} == {want}
