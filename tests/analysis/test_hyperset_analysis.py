"""Effective rank (Eq. 17) and average angle (Eq. 18) on cases with known answers; the trajectory
of a tiny model has one entry per iteration; the plots are written."""

import math

import torch

from energyformer.analysis.hyperset import (
    average_angle, effective_rank, is_decreasing, plot_energies, plot_rank_angle, trajectory,
)
from energyformer.models import MODELS, ModelConfig


def test_effective_rank_known_cases():
    q, _ = torch.linalg.qr(torch.randn(10, 4, dtype=torch.float64))
    assert math.isclose(float(effective_rank(q * 3)), 4.0, rel_tol=1e-6)  # equal singular values
    rank1 = torch.randn(10, 1) @ torch.randn(1, 4)
    assert math.isclose(float(effective_rank(rank1)), 1.0, rel_tol=1e-4)
    s = torch.tensor([3.0, 1.0])  # p = (0.75, 0.25): exp(H)
    m = torch.diag(s)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert math.isclose(float(effective_rank(m)), math.exp(h), rel_tol=1e-6)


def test_average_angle_paper_and_code_definitions():
    e = torch.eye(3)
    assert math.isclose(float(average_angle(e)), 90.0, abs_tol=1e-4)
    same = torch.ones(4, 3)
    assert float(average_angle(same)) < 1e-3
    # two pairs at 0° and one at 180°... use three unit vectors at 0°, 60°, 120° in the plane
    v = torch.tensor([[1.0, 0.0], [0.5, math.sqrt(3) / 2], [-0.5, math.sqrt(3) / 2]])
    cos_mean = (0.5 + (-0.5) + 0.5) / 3  # pairs (0,1)=60°, (0,2)=120°, (1,2)=60°
    assert math.isclose(float(average_angle(v)), math.degrees(math.acos(cos_mean)), rel_tol=1e-5)
    assert math.isclose(float(average_angle(v, mode="code")), 80.0, rel_tol=1e-5)  # mean(60, 120, 60)


def test_trajectory_lengths_and_plots(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=16, heads=2, n_layers=1, iterations=2, positions="learned",
                                          max_seq_len=81, causal=False,
                                          block={"attention": "hyperset", "mlp": "hyperset"}))
    m = MODELS.build(cfg, n_out=9)
    idx = torch.randint(0, 10, (3, 81))
    tr = trajectory(m, idx, 4)
    assert len(tr["e_total"]) == 5 and len(tr["eff_rank"][0]) == 2 and len(tr["angle"]) == 5
    assert is_decreasing(tr["e_total"])  # zero-initialised steps: constant energy
    base = MODELS.build(cfg.model_copy(update={"block": cfg.block.model_copy(
        update={"attention": MODELS.get("transformer").config.model_validate(
            {"block": {"attention": "gpt"}}).block.attention, "mlp": MODELS.get("transformer").config.model_validate(
            {"block": {"mlp": "gelu"}}).block.mlp})}), n_out=9)
    tb = trajectory(base, idx, 4)
    assert tb["e_total"][0] is None and len(tb["angle"]) == 5
    plot_energies(tr, 2, tmp_path / "e.png")
    plot_rank_angle({"a": tr, "b": tb}, 2, tmp_path / "r.png")
    assert all((tmp_path / f).stat().st_size > 1000 for f in ("e.png", "r.png"))


def _tiny(attention, mlp, **extra):
    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=16, heads=2, n_layers=1, iterations=2, positions="learned",
                                          max_seq_len=81, causal=False, block={"attention": attention, "mlp": mlp},
                                          **extra))
    return MODELS.build(cfg, n_out=9)


def test_trajectory_numbers_are_those_of_their_definitions():
    """Outside-probe mutants that survived: x^t's energy read with iteration t - 1's LoRA weights, the full rank of
    the subspace projections instead of the state, a GPT layer's keys in place of its queries."""
    from energyformer.analysis.hyperset import _subspaces, iteration_states

    torch.manual_seed(0)
    lora = {"rank": 2, "iterations": 2, "beyond": "last"}
    m = _tiny({"kind": "hyperset", "lora": lora}, {"kind": "hyperset", "lora": lora})
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))   # non-zero LoRA B: each iteration's weights differ
    idx = torch.randint(0, 10, (2, 81))
    tr = trajectory(m, idx, 3)
    states, layer = iteration_states(m, idx, 3), m.layers[0]
    for t, x in enumerate(states):
        it = min(t, 1)
        ea = float(layer.attn.energy_at(x, it).sum(-1).mean())
        assert math.isclose(tr["e_attn"][t], ea, rel_tol=1e-5) and tr["full_rank"][t] == float(effective_rank(x).mean())
    assert layer.attn.energy_at(states[1], 1).sum() != layer.attn.energy_at(states[1], 0).sum()
    gpt = _tiny("gpt", "gelu")
    x = torch.randn(2, 81, 16)
    h = gpt.layers[0].attn.norm(x)
    q = torch.nn.functional.linear(h, gpt.layers[0].attn.c_attn.weight[:16], gpt.layers[0].attn.c_attn.bias[:16])
    q = q.reshape(2, 81, 2, 8).transpose(1, 2)
    torch.testing.assert_close(_subspaces(gpt.layers[0], x), torch.nn.functional.rms_norm(q, (8,)))
