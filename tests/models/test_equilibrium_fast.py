"""EqT refinement fast path = the original path (closed-form energy gradients, no graph at eval).

The original path is rebuilt by swapping the reverse and mask terms of the ERM for the original
formulas (tests/energies/test_coherence_fast.py) differentiated by autograd, as they were before the
rewrite. In float64 the logits at K = 8 (eval) and every parameter gradient of one training step
(K = 2, unrolled) agree to 1e-10.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch

from energyformer.models import MODELS
from energyformer.models.equilibrium import EquilibriumConfig

KW = dict(vocab_size=2, dim=16, n_layers=2, heads=2, max_seq_len=24, positions="sinusoidal")
_spec = importlib.util.spec_from_file_location(
    "_coherence_fast", Path(__file__).parents[1] / "energies" / "test_coherence_fast.py")
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)


def _model(dtype=torch.float64, **refine):
    torch.manual_seed(0)
    refine = {"window": 6, "hidden": 16, **refine}
    m = MODELS.build(EquilibriumConfig(**KW, refine=refine), vocab_size=2, n_out=2).to(dtype)
    with torch.no_grad():  # a non-trivial energy (the mask term starts at zero / one vectors)
        for p in m.refiners()[0].energy.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return m


def _x(B=2, N=12):
    return torch.randint(0, 2, (B, N), generator=torch.Generator().manual_seed(1))


def _use_original(model) -> None:
    """Swap the rev / mask terms of every ERM for the original formulas + autograd gradients."""
    for r in model.refiners():
        for name, old in (("rev", _ref._old_rev), ("mask", _ref._old_mask)):
            term = r.energy.terms[name]

            def prepare(context, **kw):
                gen = context.generator or torch.Generator().set_state(torch.get_rng_state())
                return (context, gen.get_state())

            def energy(h, st, term=term, old=old):
                context, g = st
                context = copy.copy(context)
                context.generator = torch.Generator().set_state(g)  # the same mask at every step
                return old(term, context, h)

            def grad(h, st, energy=energy):
                with torch.enable_grad():
                    hg = h if h.requires_grad else h.detach().requires_grad_(True)
                    (g,) = torch.autograd.grad(energy(hg, st).sum(), hg, create_graph=torch.is_grad_enabled())
                return g

            term.prepare, term.energy, term.grad = prepare, energy, grad


@pytest.mark.parametrize("placement", ["last", "every"])
def test_eval_logits_equal_the_original_path(placement):
    fast = _model(placement=placement).eval()
    old = copy.deepcopy(fast)
    _use_original(old)
    x = _x()
    with torch.no_grad():
        a, b = fast(x, steps=8).logits, old(x, steps=8).logits
    assert (a - fast(x, steps=0).logits).abs().max() > 1e-6  # refinement does something
    assert torch.allclose(a, b, atol=1e-10, rtol=0)


def test_training_step_gradients_equal_the_original_path():
    fast = _model(steps=2, beta=0.3).train()
    old = copy.deepcopy(fast)
    _use_original(old)
    x, y = _x(), _x().flip(1)
    grads = []
    for m in (fast, old):
        torch.manual_seed(5)  # the training mask comes from torch's RNG
        out = m(x, y)
        (out.loss + sum(out.aux_losses.values())).backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
    for n, g in grads[0].items():
        h = grads[1][n]
        assert (g is None) == (h is None), n
        if g is not None:
            assert torch.allclose(g, h, atol=1e-10, rtol=0), n


@pytest.mark.parametrize("scale", [1e-2, 1.0, 20.0])
def test_float32_tracks_float64(scale):
    m64 = _model().eval()
    m32 = copy.deepcopy(m64).float()
    with torch.no_grad():
        for m in (m64, m32):
            m.embed.weight.mul_(scale)
        a, b = m64(_x(), steps=8).logits, m32(_x(), steps=8).logits
    assert torch.isfinite(b).all()
    assert torch.allclose(b.double(), a, rtol=1e-3, atol=1e-3)


def test_eval_builds_no_graph_and_k0_prepares_nothing():
    m = _model().eval()
    (r,) = m.refiners()
    f = torch.randn(2, 12, 16, dtype=torch.float64, requires_grad=True)
    from energyformer.core.context import ForwardContext

    h = r(f, ForwardContext(inputs=_x(), steps=4))
    assert not h.requires_grad  # no graph through the K steps at eval
    calls, prepare = [], r.energy.prepare
    r.energy.prepare = lambda *a, **k: calls.append(1) or prepare(*a, **k)
    r(f, ForwardContext(inputs=_x(), steps=0))
    assert calls == []
    m.train()
    r(f, ForwardContext(inputs=_x(), steps=0))  # training still reads ℒ(h⁽ᴷ⁾) for the loss
    assert calls == [1]
