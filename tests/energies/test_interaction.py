"""CEM attention: fused path vs dense reference, T=1 equals tied MHA, exact gradient step, causality,
KV cache, preconditioner folding, autocast."""

import copy
import math

import pytest
import torch
from einops import rearrange

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig
from energyformer.core import ForwardContext
from energyformer.energies.interaction import InteractionEnergy

from .cem_cases import decode_in_pieces, randomise, randomised, randomised_energy, visible

torch.manual_seed(0)


def test_fused_energy_matches_dense():
    for label, e, ctx, x in InteractionEnergy.examples():
        st = e.prepare(ctx)
        torch.testing.assert_close(e.energy_fused(x, st), e.energy(x, st), rtol=1e-10, atol=1e-10)


def test_t1_equals_tied_multihead_attention_with_residual():
    D, H, N = 32, 4, 9
    blk = CEMAttention(D, H, CEMAttentionConfig(diagonal="none", alibi=False, self_bias=False)).double()
    randomise(blk, 0)
    x = torch.randn(3, N, D, dtype=torch.float64)
    y = blk(x)
    # hand-written tied MHA: W_V = W_K, W_O = W_Q, pre-RMSNorm, residual
    h = blk.norm(x)
    wq, wk = blk.energy.wq.weight, blk.energy.wk.weight
    q = rearrange(h @ wq.T, "b n (h r) -> b h n r", h=H)
    k = rearrange(h @ wk.T, "b n (h r) -> b h n r", h=H)
    s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    o = rearrange(s.softmax(-1) @ k, "b h n r -> b n (h r)")
    ref = x + o @ wq
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("diagonal", ["shared", "per_head"])
def test_update_is_exact_negative_gradient_step(diagonal):
    eta = 0.7
    cfg = CEMAttentionConfig(diagonal=diagonal, step_size=eta, norm={"in_loop": False})
    blk = CEMAttention(16, 4, cfg).double()
    randomise(blk, 1)
    assert blk.exact
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    y = blk(x)
    st = blk.energy.prepare(blk.norm(x))
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(blk.energy.energy(xg, st).sum(), xg)
    torch.testing.assert_close(y - x, -eta * g, rtol=1e-10, atol=1e-12)


def test_norm_in_loop_is_reported_inexact_and_uses_gradient_at_normalised_point():
    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=1)).double()
    randomise(blk, 2)
    assert not blk.exact
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    u = blk.norm(x)
    st = blk.energy.prepare(u)
    ug = u.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(blk.energy.energy(ug, st).sum(), ug)
    torch.testing.assert_close(blk(x) - x, -g, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("path", ["fused", "blocked"])
@pytest.mark.parametrize("diagonal", ["shared", "per_head"])
def test_per_head_preconditioner_folding_matches_dense_matrices(path, diagonal):
    """Σ_k P_k (W_Qkᵀ o_qk + d_k∘o_hk) with dense P_k matrices and an explicit softmax, both paths
    (the blocked path pushes P_k's low-rank part through the attention average)."""
    cfg = CEMAttentionConfig(precond="diag_low_rank", precond_rank=3, diagonal=diagonal, attn_path=path,
                             attn_block=2)
    blk = CEMAttention(16, 4, cfg).double()
    randomise(blk, 3)
    assert not blk.exact  # per-head P_k: Σ_k P_k ∇E_k is not a single-P gradient step
    e, P = blk.energy, blk.solver.precond
    u = torch.randn(2, 5, 16, dtype=torch.float64)
    h = torch.randn(2, 5, 16, dtype=torch.float64)
    st = e.prepare(h)
    assert st.path == path
    H, R = 4, e.head_dim
    wq, wk = e.wq.weight.view(H, R, 16), e.wk.weight.view(H, R, 16)
    s = torch.einsum("bid,hrd,hre,bje->bhij", u, wq, wk, h)
    dk = e.d if e.d.dim() == 2 else e.d.expand(H, 16)
    s = (s + torch.einsum("bid,hd,bjd->bhij", u, dk, h)) / e.tau
    i, j = torch.arange(5)[:, None], torch.arange(5)[None]
    s = s - e.slopes[:, None, None] * (i - j) + e.self_bias[:, None, None] * (i == j)
    p = s.masked_fill(j > i, float("-inf")).softmax(-1)
    k = torch.einsum("hrd,bjd->bhjr", wk, h)
    per_head = torch.einsum("bhij,bhjr,hrd->bhid", p, k, wq) + torch.einsum("bhij,bjd->bhid", p, h) * dk[None, :, None]
    ref = torch.einsum("hde,bhne->bnd", P.matrix(), per_head)
    torch.testing.assert_close(e.direction(u, st, P), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("steps", [1, 3])
def test_causality(steps):
    cfg = CEMAttentionConfig(steps=steps, precond="diag_low_rank", diagonal="per_head")
    blk = CEMAttention(16, 4, cfg).double()
    randomise(blk, 4)
    x = torch.randn(1, 10, 16, dtype=torch.float64)
    y = blk(x)
    for j in (0, 4, 9):
        x2 = x.clone()
        x2[:, j] += torch.randn(16, dtype=torch.float64)
        y2 = blk(x2)
        torch.testing.assert_close(y2[:, :j], y[:, :j], rtol=0, atol=1e-12)
        assert not torch.allclose(y2[:, j], y[:, j])


@pytest.mark.parametrize("path", ["auto", "fused", "blocked"])
@pytest.mark.parametrize("diagonal", ["none", "shared"])
def test_kv_cache_decoding_equals_full_forward(diagonal, path):
    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=2, diagonal=diagonal, attn_path=path, attn_block=3)).double()
    randomise(blk, 5)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    full = blk(x)
    pieces, cache = decode_in_pieces(blk, x, (4, 1, 1, 3))  # prefill, two decode steps, a chunk
    torch.testing.assert_close(pieces, full, rtol=1e-10, atol=1e-10)
    stored = cache["a"]
    assert stored["k"].shape == (2, 4, 9, 4) and (("h" in stored) == (diagonal != "none"))


def test_autocast_bfloat16_runs_and_stays_close():
    blk = CEMAttention(32, 4, CEMAttentionConfig(steps=2, precond="diag_low_rank"))
    randomise(blk, 6)
    x = torch.randn(2, 64, 32)
    ref = blk(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = blk(x)
        y.float().sum().backward()
    assert torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() / ref.abs().max() < 0.05


def test_long_sequence_alibi_numerics_fp32():
    """ALiBi feature columns reach m·N; the fused path must still match the dense reference."""
    e = InteractionEnergy(16, 2, diagonal="shared")
    u, h = torch.randn(1, 600, 16), torch.randn(1, 600, 16)
    st = e.prepare(h)
    torch.testing.assert_close(e.energy_fused(u, st), e.energy(u, st), rtol=1e-4, atol=1e-3)
    e64 = copy.deepcopy(e).double()
    st64 = e64.prepare(h.double())
    torch.testing.assert_close(e.grad(u, st).double(), e64.grad(u.double(), st64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("diagonal,alibi", [("none", False), ("none", True), ("shared", True)])
def test_fused_path_is_eligible_for_the_flash_kernel(diagonal, alibi):
    """Equal q/k/v widths keep SDPA on the fused (O(N) memory) kernel; pin it and run fwd+bwd."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=2, diagonal=diagonal, alibi=alibi))
    x = torch.randn(2, 33, 16, requires_grad=True)
    ref = blk(x)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        y = blk(x)
        y.sum().backward()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- bidirectional and masks
def _reference_energy(e: InteractionEnergy, u, h, key_mask=None):
    """Hand-written E_i = −τ Σ_k log Σ_{j visible} exp(u_iᵀ A_k h_j / τ − m_k |i − j| + δ_k [j = i]),
    visible = (j <= i if causal else all j) and (key real or j = i); independent of the fused code."""
    H, R, D = e.heads, e.head_dim, e.dim
    Wq, Wk = e.wq.weight.view(H, R, D), e.wk.weight.view(H, R, D)
    A = torch.einsum("hrd,hre->hde", Wq, Wk)  # W_Qkᵀ W_Kk: (H, D, D)
    if e.d is not None:
        A = A + torch.diag_embed(e.d if e.d.dim() == 2 else e.d.expand(H, D))
    s = torch.einsum("bid,hde,bje->bhij", u, A, h) / e.tau
    N = u.shape[1]
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    if e.alibi:
        s = s - e.slopes.to(s.dtype)[:, None, None] * (i - j).abs()
    if e.self_bias is not None:
        s = s + e.self_bias[:, None, None] * (i == j)
    s = s.masked_fill(~visible(u.shape[0], N, N, e.causal, key_mask)[:, None], float("-inf"))
    return -e.tau * torch.logsumexp(s, -1).sum(1)  # (B, N)


def _energy(diagonal="shared", alibi=True, causal=False, seed=0):
    return randomised_energy(seed, diagonal=diagonal, alibi=alibi, self_bias=alibi, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("diagonal,alibi", [("none", False), ("shared", True), ("per_head", True)])
def test_energy_and_grad_match_hand_written_reference(causal, masked, diagonal, alibi):
    """Bidirectional: sum over all j, self bias at j = i, symmetric ALiBi −m|i − j|; padded keys hidden.
    The fused path (energy_fused, grad) and the dense path (energy) both equal the reference."""
    e = _energy(diagonal, alibi, causal)
    g = torch.Generator().manual_seed(1)
    h, u = (torch.randn(2, 9, 16, generator=g, dtype=torch.float64) for _ in range(2))
    key_mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4], dtype=torch.bool) if masked else None
    if masked:
        key_mask[0, 2] = False  # a hole in the middle too
    st = e.prepare(h, mask=key_mask)
    ref = _reference_energy(e, u, h, key_mask)
    torch.testing.assert_close(e.energy(u, st), ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(e.energy_fused(u, st), ref, rtol=1e-10, atol=1e-10)
    ug = u.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(_reference_energy(e, ug, h, key_mask).sum(), ug)
    torch.testing.assert_close(e.grad(u, st), ga, rtol=1e-9, atol=1e-10)


def test_bidirectional_alibi_is_symmetric_in_distance():
    """With zero weights only the position biases remain: token i weighs j and its mirror 2i − j equally."""
    e = _energy("none", True, causal=False)
    with torch.no_grad():
        e.wq.weight.zero_()
        e.self_bias.zero_()
    h = torch.randn(1, 9, 16, dtype=torch.float64)
    st = e.prepare(h)
    o = e.attend(torch.randn(1, 9, 16, dtype=torch.float64), st).oq  # o: Σ_j p_ij k_j per head
    k = st.k  # (1, H, N, R)
    i = 4
    m = e.slopes.double()
    w = torch.exp(-m[:, None] * (torch.arange(9) - i).abs())  # (H, N)
    p = w / w.sum(-1, keepdim=True)
    torch.testing.assert_close(o[0, :, i], torch.einsum("hj,hjr->hr", p, k[0]), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_padded_keys_do_not_influence_real_tokens(causal):
    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=2, precond="diag_low_rank"), causal=causal).double()
    randomise(blk, 7)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3], dtype=torch.bool)
    y = blk(x, ForwardContext(mask=mask))
    x2 = x.clone()
    x2[1, 5:] = torch.randn(3, 16, dtype=torch.float64) * 3
    y2 = blk(x2, ForwardContext(mask=mask))
    torch.testing.assert_close(y2[mask], y[mask], rtol=0, atol=1e-12)
    assert torch.isfinite(y2).all()  # padded queries still get a defined output
    if not causal:  # without the mask, the same change does reach the real tokens
        assert not torch.allclose(blk(x2)[1, :5], blk(x)[1, :5])


def test_bidirectional_first_token_sees_later_tokens():
    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=2), causal=False).double()
    randomise(blk, 8)
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 5] += torch.randn(16, dtype=torch.float64)
    assert not torch.allclose(blk(x2)[:, 0], blk(x)[:, 0])


def test_kv_cache_with_key_mask_equals_full_forward():
    blk = CEMAttention(16, 4, CEMAttentionConfig(steps=2)).double()
    randomise(blk, 9)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7], dtype=torch.bool)  # left padding in row 0
    full = blk(x, ForwardContext(mask=mask))
    pieces, cache = decode_in_pieces(blk, x, (3, 1, 3), mask)
    torch.testing.assert_close(pieces[mask], full[mask], rtol=1e-10, atol=1e-10)
    assert cache["a"]["mask"].shape == (2, 7)


@pytest.mark.parametrize("backward", [None, {"kind": "truncated", "k": 1}])
@pytest.mark.parametrize("path", ["fused", "blocked"])
def test_per_head_bank_plan_is_built_once_per_call_and_grad_mode(path, backward, monkeypatch):
    """With T steps the bank's weight-only products (diag(P_k)∘d_k, the low-rank factors, P_k W_Qkᵀ) are built
    once per call and grad mode (InteractionState.plans) and shared by the steps: the same output and gradients
    as building them at every step, also when the first steps run untracked (``backward: truncated``, whose
    no_grad plan must not reach the tracked step: the preconditioner's gradient would be lost)."""
    extra = {} if backward is None else {"backward": backward}
    blk = randomised(CEMAttentionConfig(steps=3, precond="diag_low_rank", precond_rank=3, diagonal="per_head",
                                        attn_path=path, attn_block=4, **extra))
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    calls = []
    plan = InteractionEnergy._plan
    monkeypatch.setattr(InteractionEnergy, "_plan", lambda self, *a: calls.append(torch.is_grad_enabled())
                        or plan(self, *a))

    def run():
        blk.zero_grad()
        y = blk(x)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        return y.detach(), {n: p.grad.clone() for n, p in blk.named_parameters()}

    y, grads = run()
    assert calls == ([True] if backward is None else [False, True])
    with monkeypatch.context() as m:  # every step builds its own plan
        m.setattr(InteractionEnergy, "_step_plan", lambda self, st, precond, gradient: self._plan(precond, gradient))
        calls.clear()
        y_ref, grads_ref = run()
    assert len(calls) == 3
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    for n, g in grads_ref.items():
        torch.testing.assert_close(grads[n], g, rtol=1e-12, atol=1e-12, msg=n)
    assert grads["solver.precond.U"].abs().max() > 0 and grads["solver.precond.p"].abs().max() > 0
