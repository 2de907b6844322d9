"""``Energy.grad``'s autograd fallback holds the prepared state fixed: an energy defining only ``energy()``
whose state comes from the block's (normalised) input steps exactly as the same energy with its closed-form
gradient, in grad mode and under no_grad, with the same parameter gradients, and an implicit backward runs.
The old fallback differentiated w.r.t. x itself, so where the state was built from x too (prepare(LN(x)) in
the loop) the grad-mode step also followed the state's path (off by 0.5 here) and the implicit backward
crashed ("backward through the graph a second time")."""

from __future__ import annotations

import torch

from energyformer.core import EnergyBlock, GradientDescent, ImplicitConfig, make_backward_mode
from energyformer.core.energy import Energy

DT = torch.float64
D = 4


class _StateFromContext(Energy):
    """E_i = ½‖x_i‖² − x_i · (h_i W), the state h W from the context (an attention-like energy)."""

    def __init__(self):
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(D, D, dtype=DT, generator=torch.Generator().manual_seed(0)) * 0.3)

    def prepare(self, h, **kwargs):
        return h @ self.W

    def energy(self, x, st):
        return 0.5 * (x * x).sum(-1) - (x * st).sum(-1)


class _ClosedForm(_StateFromContext):
    def grad(self, x, st):
        return x - st


def _block(energy, **kw):
    return EnergyBlock(energy, GradientDescent(None, 0.5), 2, norm=torch.nn.LayerNorm(D, dtype=DT),
                       norm_in_loop=True, **kw)


def test_fallback_steps_as_the_closed_form_in_grad_mode_and_no_grad():
    auto, closed = _StateFromContext(), _ClosedForm()
    x = torch.randn(2, 3, D, dtype=DT, generator=torch.Generator().manual_seed(1))
    blocks = [_block(auto), _block(closed)]
    blocks[1].load_state_dict(blocks[0].state_dict())
    outs = []
    for blk in blocks:
        y = blk(x)
        y.pow(2).sum().backward()
        outs.append((y.detach(), blk.energy.W.grad.clone()))
        with torch.no_grad():
            torch.testing.assert_close(blk(x), y.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-12, atol=1e-12)


def test_implicit_backward_with_a_state_from_x0_runs_and_matches_the_closed_form():
    grads = []
    for energy in (_StateFromContext(), _ClosedForm()):
        solver = GradientDescent(None, 0.3, backward=make_backward_mode(ImplicitConfig(method="fixed_point")))
        x = torch.randn(1, 3, D, dtype=DT, generator=torch.Generator().manual_seed(2), requires_grad=True)
        EnergyBlock(energy, solver, 30)(x).sum().backward()
        grads.append((x.grad, energy.W.grad))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
