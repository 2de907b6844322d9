"""The bare_sa model kind: fixed embedding, q steps of the dynamics (solver = the slides' map), readout,
no-backprop training through local_loss, Frobenius projection, clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from energyformer.energies.pl_objectives import hebbian_gradient, pl_objective
from energyformer.energies.pseudolikelihood import bare_step
from energyformer.models import MODELS
from energyformer.models.bare_attention import BareSAConfig, BareSelfAttention
from energyformer.utils.validate import ConfigError


def _model(**kw) -> BareSelfAttention:
    cfg = dict(n_tokens=6, dim=4, n_colours=4, init_std=0.5) | kw
    return MODELS.build(BareSAConfig(**cfg)).double()


def _ids(B=3, N=6, C=4, seed=0):
    return torch.randint(0, C, (B, N), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("renorm", [True, False])
def test_q_steps_are_the_slides_map(renorm):
    m = _model(renorm=renorm, lam=1.3)
    idx = _ids()
    idx[:, 2] = 4  # masked
    x = m.embed(idx)
    assert float(x[:, 2].abs().max()) == 0.0  # mask_init zero
    J = m.energy.coupling().detach()
    ref = x
    for _ in range(3):
        ref = bare_step(ref, J, lam=1.3, renorm=renorm)
    out = m(idx, iterations=3)
    torch.testing.assert_close(out.logits, ref @ m.codebook.T, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(m.trajectory(x, 3)[-1], ref, rtol=1e-10, atol=1e-12)
    if renorm:
        torch.testing.assert_close(ref.norm(dim=-1), torch.ones(3, 6, dtype=torch.float64))


def test_clamp_observed_moves_only_masked_tokens_and_iterations_times_steps():
    m = _model(clamp_observed=True)
    idx = _ids()
    idx[:, 0] = 4
    x0 = m.embed(idx)
    res = m.run(x0, moving=idx == 4, steps=4)
    torch.testing.assert_close(res.x[:, 1:], x0[:, 1:])
    assert float((res.x[:, 0] - x0[:, 0]).detach().abs().max()) > 0
    torch.testing.assert_close(m(idx, iterations=2, steps=2).logits, m(idx, iterations=4).logits)


def test_local_loss_gradient_is_the_hebbian_rule_and_no_dynamics_graph():
    m = _model(objective="plain", init_std=0.3)
    x = m.embed(_ids(B=5))
    loss, metrics = m.local_loss(x)
    assert loss.grad_fn.name().startswith("PLObjective") and "j_norm" in metrics
    loss.backward()
    torch.testing.assert_close(m.energy.J.grad, hebbian_gradient(m.energy.J.detach(), x) / 6)


def test_random_site_and_cd_objectives_train_only_what_they_should():
    torch.manual_seed(0)
    m = _model(objective="codebook", sites="random", init_std=0.0)
    x = m.embed(_ids(B=4))
    loss, _ = m.local_loss(x)
    loss.backward()
    rows = m.energy.J.grad.flatten(1).abs().sum(1) > 0
    assert int(rows.sum()) == 1  # Eq. 13: one site's couplings J_i. per step
    m = _model(objective="cd", cd_steps=2)
    x = m.embed(_ids(B=4))
    loss, _ = m.local_loss(x)
    xm = bare_step(bare_step(x, m.energy.coupling().detach()), m.energy.coupling().detach())
    torch.testing.assert_close(loss, pl_objective(m.energy.coupling().detach(), x, kind="cd", x_model=xm))


def test_factored_coupling_trains_through_heads():
    m = _model(heads=2, head_dim=2, objective="codebook")
    loss, _ = m.local_loss(m.embed(_ids()))
    loss.backward()
    assert float(m.energy.K.grad.abs().sum()) > 0 and float(m.energy.Q.grad.abs().sum()) > 0


def test_conditional_logits_are_the_codebook_pseudo_likelihood():
    m = _model(lam=0.8, objective="codebook")
    s = _ids(B=7)
    logits = m.conditional_logits(s)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), s.flatten())
    torch.testing.assert_close(ce / 0.8, m.local_loss(m.embed(s))[0].detach())


def own_conditional_ce_reference(m: BareSelfAttention, s: torch.Tensor, site: torch.Tensor) -> torch.Tensor:
    """Independent float64 reference from the spec (reconstructed §2.1, N3): with site i masked,
    ``P(s_i = a | s_−i) ∝ Σ_{j≠i} exp(λ e_aᵀ J_ij e_{s_j})``, ``J_ij = Σ_h K_ijᴴᵀ Q_ijᴴ`` for
    heads > 0; written with per-pair loops and a max-shifted log-sum-exp. Returns -log P(s_i) per
    sequence (B,)."""
    e = m.energy
    E = m.codebook.double()
    C, N = E.shape[0], s.shape[1]
    out = []
    for b in range(s.shape[0]):
        i = int(site[b])
        terms = []
        for j in range(N):
            if j == i:
                continue
            if e.heads == 0:
                Jij = e.J.detach()[i, j].double()
            else:
                Jij = sum(e.K.detach()[h, i, j].double().T @ e.Q.detach()[h, i, j].double() for h in range(e.heads))
            v = Jij @ E[int(s[b, j])]                     # J_ij x_j, (d,)
            terms.append([m.cfg.lam * float(E[a] @ v) for a in range(C)])
        flat = [t for row in terms for t in row]
        mx = max(flat)
        log_z = mx + math.log(sum(math.exp(t - mx) for t in flat))
        col = [row[int(s[b, i])] for row in terms]
        mc = max(col)
        out.append(log_z - (mc + math.log(sum(math.exp(t - mc) for t in col))))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("heads", [0, 4])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
def test_own_conditional_equals_float64_reference_at_any_scale_of_J(heads, scale):
    """The own conditional of a float32 model (full or multi-head J) equals the float64 reference at small,
    ordinary and large magnitudes of J (float32 logits lose ~1e-3 nats at J ~ 1e4), and at small J it
    is finite and at most about ln C on random data."""
    C, N, B = 5, 6, 40
    kw = dict(n_tokens=N, dim=C, n_colours=C, init_std=0.5, lam=0.7)
    m = MODELS.build(BareSAConfig(**kw, **(dict(heads=heads, head_dim=3) if heads else {})))  # float32
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(scale if heads == 0 else math.sqrt(scale))
    s = _ids(B=B, N=N, C=C, seed=3)
    site = torch.randint(0, N, (B,), generator=torch.Generator().manual_seed(4))
    idx = s.clone()
    idx[torch.arange(B), site] = C  # one masked site per sequence
    logits = m.conditional_logits(idx)
    assert logits.dtype == torch.float64 and bool(torch.isfinite(logits).all())
    nll = -torch.log_softmax(logits, -1)[torch.arange(B), site].gather(1, s[torch.arange(B), site][:, None])[:, 0]
    ref = own_conditional_ce_reference(m, s, site)
    torch.testing.assert_close(nll, ref, rtol=1e-9, atol=1e-9)
    if scale <= 1.0:
        assert float(nll.mean()) <= math.log(C) + 0.5


def test_frobenius_projection():
    m = _model(frobenius=0.5, init_std=2.0)
    m.project_()
    norms = m.energy.J.detach().flatten(2).norm(dim=-1)
    assert float(norms.max()) <= 0.5 + 1e-12 and float(norms.max()) > 0.49


def test_config_and_input_errors():
    with pytest.raises(ConfigError, match="dim = n_colours = 4"):
        BareSAConfig(n_tokens=6, dim=5, n_colours=4)
    with pytest.raises(ConfigError, match="init_std > 0"):
        BareSAConfig(heads=2)
    with pytest.raises(ConfigError, match="n_tokens"):
        BareSelfAttention(BareSAConfig())
    m = _model()
    with pytest.raises(ValueError, match=r"token ids in \[0, 7\]; allowed 0..3 \(colours\) and 4 \(mask\)"):
        m(torch.tensor([[0, 1, 2, 3, 7, 0]]))
    with pytest.raises(ValueError, match="8 tokens; J holds couplings for 2 .. n_tokens = 6"):
        m(torch.zeros(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="padding mask"):
        m(_ids(), torch.ones(3, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="token dimension 3"):
        m.local_loss(torch.randn(2, 6, 3))


def test_traces_record_the_energy_at_every_step():
    m = _model()
    out = m(_ids(), iterations=3, trace=True, stats=True)
    (tr,) = out.traces.values()
    assert tr.steps == 3 and len(tr.mean_energy()) == 4 and tr.exact is False
    assert not m.solver.exact


@pytest.mark.parametrize("scale,gamma", [(1e25, 1.0), (1e30, 0.5)])
def test_renormalised_dynamics_are_exact_at_any_scale_of_J(scale, gamma):
    """Issue 23: the renormalisation divided by a plain ‖y‖, which overflows once |γx + Σ α J x| passes
    ~1.8e19 in float32: every token silently became 0. A float32 model at such scales of J now equals
    its float64 twin (λ scaled down so that the attention weights are ordinary ones). (The underflow
    side, ‖y‖ < 1e-19, is tested on :func:`unit` itself: with |x| = 1 and γ > 0 the model's y is not
    that small.)"""
    m32 = MODELS.build(BareSAConfig(n_tokens=6, dim=4, n_colours=4, init_std=0.5, lam=1.0 / scale, gamma=gamma))
    with torch.no_grad():
        m32.energy.J.mul_(scale)
    m64 = MODELS.build(BareSAConfig(n_tokens=6, dim=4, n_colours=4, init_std=0.5, lam=1.0 / scale, gamma=gamma))
    m64.load_state_dict(m32.state_dict())
    m64 = m64.double()
    x0 = torch.nn.functional.normalize(torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(1)), dim=-1)
    x32, x64 = m32.run(x0, steps=3).x, m64.run(x0.double(), steps=3).x
    assert bool(torch.isfinite(x32).all())
    torch.testing.assert_close(x32.norm(dim=-1), torch.ones(2, 6), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x32.double(), x64, rtol=1e-5, atol=1e-5)


def test_vmf_objective_is_finite_and_exact_at_large_J():
    """Issue 23: the vMF objective took a plain float32 norm of J_ij x_j (NaN from ~1.8e19 on); its
    value and closed-form gradient at J ~ 1e20 now match the float64 computation."""
    m = _model(n_colours=None, dim=3, objective="vmf")
    x = torch.nn.functional.normalize(torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(2),
                                                  dtype=torch.float64), dim=-1)
    J64 = m.energy.coupling().detach() * 1e20
    J32 = J64.float().requires_grad_(True)
    J64.requires_grad_(True)
    l32, l64 = pl_objective(J32, x.float(), kind="vmf"), pl_objective(J64, x, kind="vmf")
    l32.backward(), l64.backward()
    l32, l64 = float(l32.detach()), float(l64.detach())
    assert math.isfinite(l32) and math.isfinite(l64) and l64 > 0
    # float32 holds J (~1e20) to 6e-8 relative: the loss, of size ~‖J‖, to that relative accuracy
    assert abs(l32 - l64) <= 1e-6 * l64
    torch.testing.assert_close(J32.grad.double(), J64.grad, rtol=1e-4, atol=1e-6 * float(J64.grad.abs().max()))


def test_random_mask_init_is_batch_independent():
    """``mask_init: random``: a sequence's logits do not depend on the batch it is evaluated in. Before, the start
    vectors were one (B, N, d) draw: a row differed from itself run alone by up to ~1 in the logits, and copies of
    one sequence in one batch differed from each other."""
    m = _model(mask_init="random", n_tokens=6)
    idx = _ids(B=4, N=6, seed=3)
    idx[:, 1] = idx[:, 4] = 4  # masked sites
    x = m.embed(idx)
    assert torch.allclose(x[:, 1].norm(dim=-1), torch.ones(4, dtype=torch.float64))
    assert not torch.allclose(x[0, 1], x[0, 4])  # sites get their own vectors
    full = m(idx, iterations=3).logits
    for b in range(4):
        torch.testing.assert_close(m(idx[b:b + 1], iterations=3).logits[0], full[b], rtol=0, atol=1e-12)
    same = m(idx[:1].repeat(5, 1), iterations=3).logits
    torch.testing.assert_close(same, full[:1].expand(5, -1, -1), rtol=0, atol=1e-12)
    assert torch.equal(m.float().embed(idx), x.float())  # one draw whatever the dtype


def test_random_mask_vectors_first_drawn_inside_a_cuda_graph_capture_raise(monkeypatch):
    """``mask_init: random`` draws its vectors on the CPU and copies them over at their first use per shape, which a
    CUDA graph capture cannot hold: reached first inside one it says so in one line (warm up eagerly first); once
    drawn, a capture reuses the kept vectors (no copy, no error)."""
    m = _model(mask_init="random", n_tokens=6)
    idx = _ids(B=2, N=6, seed=3)
    idx[:, 1] = 4
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"\(6, \d+\).*CUDA graph.*eager forward"):
        m.embed(idx)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    warm = m.embed(idx)  # the eager warm-up draws them
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert torch.equal(m.embed(idx), warm)


@pytest.mark.parametrize("idx", [_ids().bool(), _ids().to(torch.uint8), _ids().float(), _ids()[0]],
                         ids=["bool", "uint8", "float", "1-d"])
def test_token_ids_of_another_dtype_or_rank_are_one_line_errors(idx):
    """Probe AS: bool ids were read as colours 0 / 1 (the transformer models refuse them) and uint8 ids failed in
    a mask index deep inside ('The shape of the mask ...')."""
    with pytest.raises(ValueError, match=r"token ids must be an int64 or int32 \(batch, tokens\) tensor; got torch\."):
        _model()(idx)
    assert _model()(_ids().int()).logits.shape == (3, 6, 4)
