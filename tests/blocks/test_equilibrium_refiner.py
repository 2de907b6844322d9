"""The EqT refiner's small rules, each pinned where an outside probe's mutant survived the model-level tests: the
training terms' masked mean times β, the entropy threshold in nats of the n_out classes, the rounded K curriculum,
the relative change per token against the previous iterate, the consistency term's forward map."""

from __future__ import annotations

import math

import pytest
import torch

from energyformer.blocks.equilibrium import _RelativeChange
from energyformer.core.context import ForwardContext
from energyformer.models import MODELS
from energyformer.models.equilibrium import EquilibriumConfig

KW = dict(vocab_size=5, dim=16, n_layers=2, heads=2, max_seq_len=24, positions="sinusoidal")


def _refiner(**refine):
    torch.manual_seed(0)
    m = MODELS.build(EquilibriumConfig(**KW, refine={"window": 6, "hidden": 16, **refine}), vocab_size=5, n_out=5)
    return m, m.refiners()[0]


def test_training_terms_are_beta_times_the_masked_mean(monkeypatch):
    _, r = _refiner(beta=0.3)
    terms = {"rev": torch.tensor([[1.0, 2.0, 30.0], [4.0, 50.0, 60.0]]), "mask": torch.ones(2, 3)}
    monkeypatch.setattr(r.energy, "energy_terms", lambda h, state: terms)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()   # key padding: the 30, 50 and 60 are padded tokens
    ctx = ForwardContext(mask=mask)
    r._training_terms(torch.zeros(2, 3, 16), None, ctx)
    assert math.isclose(float(ctx.aux_losses["eqt/rev"]), 0.3 * (1 + 2 + 4) / 3, rel_tol=1e-6)
    assert math.isclose(float(ctx.aux_losses["eqt/mask"]), 0.3, rel_tol=1e-6)
    ctx = ForwardContext()
    r._training_terms(torch.zeros(2, 3, 16), None, ctx)
    assert math.isclose(float(ctx.aux_losses["eqt/rev"]), 0.3 * 147 / 6, rel_tol=1e-6)


def test_uncertain_tokens_at_a_fraction_of_the_largest_entropy():
    """A uniform output has entropy ln n_out: uncertain at threshold 0.9 (of ln n_out, nats), and at 1.0."""
    _, r = _refiner(adaptive="entropy", entropy_threshold=0.9)
    head, _ = r._head_norm
    with torch.no_grad():
        head.weight.zero_()
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()
    assert bool(r._uncertain(torch.randn(1, 4, 16)).all())
    r.cfg = r.cfg.model_copy(update={"entropy_threshold": 1.0})
    assert bool(r._uncertain(torch.randn(1, 4, 16)).all())



def test_the_threshold_is_a_fraction_of_ln_n_out_not_nats():
    """threshold 0.5 of ln 5 = 0.80 nats: an output of entropy 0.63 nats is certain, one of 1.0 nats uncertain (an
    unscaled threshold, 0.5 nats, called both uncertain: the uniform output of the test above cannot tell)."""
    _, r = _refiner(adaptive="entropy", entropy_threshold=0.5)
    for p, uncertain in (([0.85] + [0.0375] * 4, False), ([0.7] + [0.075] * 4, True)):
        logits = torch.tensor(p).log()
        ent = -(torch.tensor(p) * logits).sum()
        assert bool(ent >= 0.5 * math.log(5)) == uncertain and float(ent) >= 0.5  # both above 0.5 nats
        r._head_norm = (lambda f, lg=logits: lg.expand(*f.shape[:2], 5), lambda f: f)
        assert r._uncertain(torch.randn(2, 3, 16)).eq(uncertain).all()


def test_a_refined_layer_refines_the_layers_output():
    """RefinedLayer: x -> refiner(layer(x)), the layer's output is the proposal f (seed 003 §2.3), not
    layer(refiner(x))."""
    from energyformer.blocks.equilibrium import RefinedLayer

    class Affine(torch.nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.a, self.b = a, b

        def forward(self, x, ctx=None):
            return self.a * x + self.b

    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(RefinedLayer(Affine(2.0, 0.0), Affine(1.0, 1.0))(x), 2 * x + 1)

def test_k_curriculum_rounds_and_relative_change_is_per_token():
    _, r = _refiner()
    r.k_train = 2.6
    assert r.steps == 3
    r.k_train = -1.0
    assert r.steps == 0
    rel = _RelativeChange()
    a, b = torch.tensor([[[3.0, 4.0]]]), torch.tensor([[[3.0, 14.0]]])
    rel.see(a)
    rel.see(a)          # the same iterate shown twice: skipped
    rel.see(b)
    assert len(rel.rel) == 1 and torch.allclose(rel.rel[0], torch.tensor([[2.0]]))   # 10 / 5, not 10 / |b|


@pytest.mark.parametrize("consist_map", ["mlp", "own"])
def test_the_consistency_term_maps_through_the_layers_mlp(consist_map):
    """``consist_map: mlp`` (default): F_θ is the refined layer's MLP sublayer, shared; ``own``: a new network."""
    from energyformer.energies.coherence_pointwise import _ResidualMLP

    m, r = _refiner(energy="consistency", consist_map=consist_map)
    fmap = r.energy.terms["consist"]._held("forward_map")
    assert isinstance(fmap, _ResidualMLP) == (consist_map == "own")
    refined = [layer for layer in m.layers if getattr(layer, "refiner", None) is r]
    assert len(refined) == 1 and (fmap is refined[0].layer.mlp) == (consist_map == "mlp")
