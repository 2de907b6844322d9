"""Equilibrium transformer (EqT, seed 003): the "Must show" properties of issue 13.

Refinement off (ℒ ≡ 0 or K = 0) = backbone + final LayerNorm exactly; the proximal step on a quadratic
energy is the closed form and contracts at max|1 − α(λ + 1/γ)|; early stopping reports steps per
token; K_eval > K_train works; the training loss carries β·λ_i·ℒ_i."""

import pytest
import torch

from energyformer.core import ProximalGradient
from energyformer.core.quadratic import QuadraticEnergy
from energyformer.models import MODELS
from energyformer.models.equilibrium import EquilibriumConfig
from energyformer.utils.validate import ConfigError

KW = dict(vocab_size=2, dim=16, n_layers=2, heads=2, max_seq_len=16, positions="sinusoidal")


def _model(**refine):
    torch.manual_seed(0)
    refine = {"window": 4, "hidden": 16, **refine}
    return MODELS.build(EquilibriumConfig(**KW, refine=refine), vocab_size=2, n_out=2).eval()


def _x():
    return torch.randint(0, 2, (3, 10), generator=torch.Generator().manual_seed(1))


def _backbone_logits(model, x):
    """The same model with every ERM removed: backbone layers, then the final LayerNorm and head."""
    refined = {i: l for i, l in enumerate(model.layers) if hasattr(l, "refiner")}
    for i, l in refined.items():
        model.layers[i] = l.layer
    try:
        return model(x).logits
    finally:
        for i, l in refined.items():
            model.layers[i] = l


@pytest.mark.parametrize("placement", ["last", "every"])
def test_zero_steps_is_the_backbone_followed_by_the_final_layernorm(placement):
    m = _model(placement=placement)
    x = _x()
    with torch.no_grad():
        assert torch.equal(m(x, steps=0).logits, _backbone_logits(m, x))
        assert not torch.equal(m(x, steps=4).logits, _backbone_logits(m, x))  # refinement does act
    assert isinstance(m.norm, torch.nn.LayerNorm)


def test_zero_energy_is_the_backbone_followed_by_the_final_layernorm():
    m = _model()
    for r in m.refiners():
        r.energy.weights = {k: 0.0 for k in r.energy.weights}   # ℒ ≡ 0: only the proximal term is left
    x = _x()
    with torch.no_grad():
        assert torch.equal(m(x, steps=8).logits, _backbone_logits(m, x))


def test_proximal_step_is_the_closed_form_and_contracts_at_the_predicted_rate():
    lam = torch.tensor([0.5, 2.0, 8.0], dtype=torch.float64)
    alpha, gamma = 0.1, 0.5
    energy = QuadraticEnergy(3, scales=lam)
    g = torch.Generator().manual_seed(0)
    c = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    f = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    solver = ProximalGradient(step_size=alpha, gamma=gamma)
    state = energy.prepare(c)
    h, hs = f.clone(), []
    for k in range(1, 6):
        h = h - alpha * (lam * (h - c) + (h - f) / gamma)          # Eq. 8, closed form
        hs.append(h)
        torch.testing.assert_close(solver.run(energy, f, state, k, anchor=f).x, h)
    h_star = (lam * c + f / gamma) / (lam + 1 / gamma)
    rho = (1 - alpha * (lam + 1 / gamma)).abs()
    torch.testing.assert_close(hs[-1] - h_star, rho ** 5 * (f - h_star))  # per coordinate
    e0, e5 = (f - h_star).norm(dim=-1), (hs[-1] - h_star).norm(dim=-1)
    assert (e5 <= rho.max() ** 5 * e0 + 1e-12).all()


def test_early_stopping_reports_steps_per_token_and_stops_converged_tokens():
    m = _model(eval_steps=32)
    for r in m.refiners():
        r.energy.weights = {k: w * 50 for k, w in r.energy.weights.items()}  # a visible pull
    x = _x()
    with torch.no_grad():
        (full,) = m(x, stats=True).stats.values()               # no tolerance: every token takes 32 steps
        assert (full.steps == 32).all()
        eps = float(full.step_norm.median())                    # half the tokens end below it
        for r in m.refiners():
            r.solver.tol = eps
        (st,) = m(x, stats=True).stats.values()
    assert st.steps.shape == (3, 10) and (st.steps >= 1).all() and (st.steps <= 32).all()
    assert (st.steps < 32).any() and (st.steps == 32).any()   # converged tokens stopped, the others ran on
    assert (st.step_norm[st.steps < 32] < eps).all()          # absolute ‖Δh‖ < ε at the stop
    assert len(st.relative) >= 1 and st.relative[0].shape == (3, 10)


def test_k_eval_larger_than_k_train_and_training_loss_terms():
    m = _model(steps=2, eval_steps=8).train()
    x = _x()
    out = m(x, stats=True)
    assert set(out.aux_losses) == {"eqt/rev", "eqt/mask", "eqt/conf"}
    (st,) = out.stats.values()
    assert int(st.steps.max()) == 2
    loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), (x.cumsum(-1) % 2).flatten())
    (loss + sum(out.aux_losses.values())).backward()
    assert all(p.grad is not None for p in m.refiners()[0].energy.parameters() if p.requires_grad)
    m.eval()
    with torch.no_grad():
        (st8,) = m(x, stats=True).stats.values()
        (st32,) = m(x, stats=True, steps=32).stats.values()
    assert int(st8.steps.max()) == 8 and int(st32.steps.max()) == 32


def test_a_bidirectional_equilibrium_model_is_refused():
    with pytest.raises(ConfigError, match="causal"):
        MODELS.build(EquilibriumConfig(**KW, causal=False), vocab_size=2, n_out=2)


@pytest.mark.parametrize("where", ["left", "right"])
def test_padded_tokens_do_not_reach_the_real_ones(where):
    """Once: the coherence energies read every position, so with left padding a padded token's id reached the
    real tokens' logits (2e-4). Now padded contents change nothing; a padded row equals the row cut to its real
    tokens where nothing is drawn at random (no mask term); an all-real mask is no mask."""
    m, x = _model(weights={"rev": 1.0, "mask": 0.5, "conf": 0.2}), _x()
    mask = torch.ones(x.shape, dtype=torch.bool)
    pad = slice(0, 3) if where == "left" else slice(7, None)
    mask[:, pad] = False
    x2 = x.clone()
    x2[:, pad] = 1 - x2[:, pad]
    with torch.no_grad():
        assert torch.equal(m(x, mask=torch.ones_like(mask)).logits, m(x).logits)
        a, b = m(x, mask=mask).logits, m(x2, mask=mask).logits
        torch.testing.assert_close(b[mask], a[mask], rtol=0, atol=1e-12)
        if where == "left":  # causal: only earlier padding can reach a real token, and without the mask it does
            assert not torch.allclose(m(x2).logits[mask], a[mask])
        m_rev = _model(weights={"rev": 1.0, "mask": 0.0, "conf": 0.2})  # positions count real tokens only
        real = slice(3, None) if where == "left" else slice(0, 7)
        torch.testing.assert_close(m_rev(x, mask=mask).logits[:, real], m_rev(x[:, real]).logits, rtol=1e-10,
                                   atol=1e-12)


def test_gamma_annealing_and_k_curriculum_are_trainer_callbacks():
    m = _model(gamma_anneal={"start": 10, "end": 1, "steps": 10},
               k_curriculum={"start": 2, "end": 4, "steps": 1, "begin": 5})
    (r,) = m.refiners()
    cbs = {cb.label.rsplit(".", 1)[-1]: cb for cb in m.callbacks()}
    assert set(cbs) == {"gamma", "k_train"}
    for cb in cbs.values():
        cb.bind(m)
    expect = {0: (10.0, 2), 5: (5.5, 2), 6: (4.6, 4), 10: (1.0, 4), 50: (1.0, 4)}
    for t, (gamma, k) in expect.items():
        for cb in cbs.values():
            cb.apply(cb.value(t))
        assert float(r.solver.gamma) == pytest.approx(gamma) and r.steps == k


@pytest.mark.slow
def test_implicit_backward_trains_the_model_and_reports_non_convergence():
    m = _model(backward="implicit", implicit_method="cg", steps=16).train()
    out = m(_x())
    (out.logits.sum() + sum(out.aux_losses.values())).backward()
    (r,) = m.refiners()
    assert r.solver.backward.last["status"] == "converged"
    assert all(p.grad is not None for p in r.energy.parameters() if p.requires_grad)
    m2 = _model(backward="implicit", implicit_method="fixed_point", implicit_max_iter=2, steps=16).train()
    out = m2(_x())
    with pytest.warns(UserWarning, match="did not converge"):
        (out.logits.sum() + sum(out.aux_losses.values())).backward()
    assert m2.refiners()[0].solver.backward.failures == 1


@pytest.mark.parametrize("threshold,expected", [(0.01, 6), (1.0, 2)])
def test_adaptive_k_gives_uncertain_tokens_k_high_and_confident_ones_k_low(threshold, expected):
    """Entropy switch (§3.7): entropy ≥ threshold·ln C → k_high steps, else k_low (eval mode only)."""
    m = _model(adaptive="entropy", k_low=2, k_high=6, entropy_threshold=threshold)
    with torch.no_grad():
        (st,) = m(_x(), stats=True).stats.values()
        assert (st.steps == expected).all()
        (forced,) = m(_x(), stats=True, steps=3).stats.values()   # an explicit K overrides the switch
    assert (forced.steps == 3).all()


def test_eval_output_of_a_row_does_not_depend_on_its_batch():
    """The eval mask is one reproducible draw for every row: a row alone, inside a batch or at another place
    in it gives the same logits (each row used its own slice of one (B, N, W) draw, so a row's mask — and its
    logits, 1e-6 apart in float64 at init, more as the mask term grows — changed with the batch)."""
    m = _model(window=6).double()
    with torch.no_grad():  # a mask term that matters (it starts at zero / one vectors)
        for p in m.refiners()[0].energy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2), dtype=p.dtype))
    x = torch.randint(0, 2, (4, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = m(x, steps=4).logits
        assert (full - m(x, steps=0).logits).abs().max() > 1e-4  # the refinement does something
        for i in range(4):
            torch.testing.assert_close(m(x[i:i + 1], steps=4).logits[0], full[i], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(m(x.flip(0), steps=4).logits.flip(0), full, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("train", [False, True])
def test_an_empty_batch_gives_empty_logits(train):
    """B = 0 gives (0, N, n_out) as every other model kind does (the mask term's band product ended in
    "cannot reshape tensor of 0 elements ... -1 ... ambiguous")."""
    m = _model().train(train)
    out = m(torch.zeros(0, 10, dtype=torch.long), steps=2)
    assert out.logits.shape == (0, 10, 2)


def _graph_ops(t) -> set[str]:
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        todo += [f for f, _ in fn.next_functions]
    return names


def test_a_training_step_adds_in_a_fixed_order():
    """Two identical EqT trainings on 2 CPU threads parted after 16 steps: the mask term gathered by advanced
    indexing (its backward, IndexBackward, and index_put(accumulate) add in thread order). Its graph now holds
    index_select / index_add only, whose CPU kernels add in index order."""
    m = _model(window=6).train()
    x = torch.randint(0, 2, (3, 10), generator=torch.Generator().manual_seed(4))
    out = m(x, x.flip(1))
    ops = _graph_ops(out.loss + sum(out.aux_losses.values()))
    assert "IndexSelectBackward0" in ops  # the gathers are there ...
    assert not {"IndexBackward0", "IndexPutBackward0"} & ops, ops  # ... and none of the unordered kinds
