"""The bare_sa model kind: fixed embedding, q steps of the dynamics (solver = the slides' map), readout,
no-backprop training through local_loss, Frobenius projection, clear errors."""

from __future__ import annotations

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
