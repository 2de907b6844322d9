"""ET block (attention kind 'et'): its update is -alpha * grad of its registered energy at g = LN(x)
(checked against autograd), and it lowers E(LN(x)) for a small alpha although it is not -grad_x."""

import pytest
import torch

from energyformer.blocks import ETConfig, SublayerSpec, build_attention
from energyformer.core import ENERGIES
from energyformer.utils.validate import ConfigError


def _block(alpha=0.5, steps=1, **kw):
    torch.manual_seed(0)
    cfg = ETConfig(steps=steps, step_size=alpha, memories_ratio=2.0, init_std=0.3, **kw)
    blk = build_attention(cfg, SublayerSpec(dim=8, heads=2, causal=False)).double()
    with torch.no_grad():
        blk.norm.gamma.fill_(1.3)
        blk.norm.delta.normal_(0, 0.2)
    return blk


def _autograd_step(blk, x, alpha):
    """x - alpha * dE/dg at g = LN(x), E the block's registered energy, gradient by autograd."""
    g = blk.norm(x).detach().requires_grad_(True)
    e = blk.energy
    E = e.energy(g, e.prepare(g)).sum()
    (dg,) = torch.autograd.grad(E, g)
    return x - alpha * dg


def test_et_energy_is_registered():
    blk = _block()
    assert ENERGIES["energy_transformer"] is type(blk.energy)
    assert blk.exact is False  # the norm sits in the loop: not -grad_x of E(LN(x)) ...


@pytest.mark.parametrize("steps", [1, 3])
def test_et_update_equals_minus_alpha_grad_of_its_energy(steps):
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    blk = _block(alpha=0.4, steps=steps)
    ref = x
    for _ in range(steps):
        ref = _autograd_step(blk, ref, 0.4)
    with torch.no_grad():
        out = blk(x)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_et_steps_lower_the_energy_of_the_normalised_tokens():
    """... but a descent direction of E(LN(x)) (scalar-gain LN has a symmetric PSD Jacobian)."""
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    blk = _block(alpha=0.02, steps=12)
    from energyformer.core import ForwardContext
    from energyformer.core.trace import Traces

    ctx = ForwardContext(traces=Traces())
    with torch.no_grad():
        blk(x, ctx)
    (trace,) = ctx.traces.values()
    e = [float(v.sum()) for v in trace.energy]
    assert len(e) == 13 and all(b < a for a, b in zip(e, e[1:])), e
    assert set(trace.terms) == {"attention", "hopfield"}


def test_et_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="bidirectional"):
        build_attention(ETConfig(), SublayerSpec(dim=8, heads=2, causal=True))
    with pytest.raises(ConfigError, match="head_dim"):
        build_attention(ETConfig(), SublayerSpec(dim=9, heads=2, causal=False))
    with pytest.raises(ConfigError, match="memories_ratio"):
        ETConfig(memories_ratio=-1)
