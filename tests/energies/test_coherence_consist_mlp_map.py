"""``coherence_consist`` with EqT's default ``consist_map: mlp`` (F = the refined layer's MLP sublayer) in float32.

The energy forms ‖r₁ + b̃(h + r₁)‖² from F's residual branch r₁ = F.branch(h) when F has one. The baseline
MLP sublayers (``swiglu``, ``gelu``, ``relu``) had none, so the energy took r₁ = F(h) − h: F(h) rounded at the
size of h, then h subtracted (cancellation), and at inputs x1e4 with weights x0.01 the float32 gradient was
off float64 by a relative ~1 (the energy by ~1e-3), while float64 on the same float32-rounded data agrees to
~3e-8. Now each sublayer has ``branch(x)`` with ``forward(x) == x + branch(x)``, its outputs bitwise the old."""

import copy

import pytest
import torch
import torch.nn.functional as F

from energyformer.blocks import baselines
from energyformer.core.fuzz import scale_weights_
from energyformer.models import MODELS
from energyformer.models.equilibrium import EquilibriumConfig


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach()
    return float((a - b).norm() / b.norm())


def _consist_term(model):
    return model.refiners()[0].energy.terms["consist"]


@pytest.mark.parametrize("mlp", ["swiglu", "gelu", "relu"])
def test_float32_energy_and_gradient_match_float64_with_the_layer_mlp(mlp):
    """EqT (energy: consistency, default consist_map: mlp), float32 against float64 on the same float32-rounded
    inputs and weights at inputs x1e4, weights x0.01: within 1e-5 (old: no ``branch`` on the sublayer, F(h) − h
    cancelled; swiglu's gradient was 1.0 off)."""
    torch.manual_seed(0)
    cfg = EquilibriumConfig(vocab_size=2, dim=16, n_layers=1, heads=2, max_seq_len=8, block={"mlp": mlp},
                            refine={"energy": "consistency", "hidden": 16})
    m32 = MODELS.build(cfg, vocab_size=2, n_out=2).eval()
    t32 = _consist_term(m32)
    fmap = t32._held("forward_map")
    assert fmap is m32.layers[0].layer.mlp  # the default map is the layer's sublayer
    for mod in (fmap, t32.inverse):
        scale_weights_(mod, 0.01)
        with torch.no_grad():  # non-trivial gains and biases (initialised to ones / zeros)
            for p in mod.parameters():
                if p.dim() < 2:
                    p.add_(0.1 * torch.randn_like(p))
    t64 = _consist_term(copy.deepcopy(m32).double())
    h32 = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1)) * 1e4
    h64 = h32.double()
    assert _rel(t32.energy(h32, None), t64.energy(h64, None)) < 1e-5
    assert _rel(t32.grad(h32, None), t64.grad(h64, None)) < 1e-5


def _old_forward(m, x):
    """The forward expressions before ``branch`` existed (as in the old baselines.py)."""
    if isinstance(m, baselines.SwiGLU):
        h = m.norm(x)
        return x + m.w_down(F.silu(m.w_gate(h)) * m.w_up(h))
    if isinstance(m, baselines.GeluMLP):
        return x + m.drop(m.proj(F.gelu(m.fc(m.norm(x)))))
    return x + m.proj(F.relu(m.fc(m.norm(x))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_is_x_plus_branch_and_bitwise_the_old_forward(dtype):
    """forward == x + branch(x) == the old forward expression, bit for bit, in eval and in training (dropout
    drawn from the same seed). Fails on the old code: no ``branch``."""
    torch.manual_seed(0)
    mods = [baselines.SwiGLU(16, 48), baselines.GeluMLP(16, 64), baselines.GeluMLP(16, 64, 0.0, "rms"),
            baselines.GeluMLP(16, 64, 0.3), baselines.ReluMLP(16, 64)]
    x = torch.randn(3, 7, 16, dtype=dtype, generator=torch.Generator().manual_seed(2)) * 100
    for mod in mods:
        mod = mod.to(dtype)
        with torch.no_grad():
            for p in mod.parameters():
                p.add_(0.1 * torch.randn_like(p))
        for train in (False, True):
            mod.train(train)
            outs = []
            for f in (mod, lambda x, mod=mod: x + mod.branch(x), lambda x, mod=mod: _old_forward(mod, x)):
                torch.manual_seed(5)
                outs.append(f(x))
            assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), (type(mod).__name__, train)
