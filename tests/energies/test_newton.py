"""MHA2nd / MHA2nd1st output pseudo-inverse: the ridge ε is relative to each head's scale and is a
config key (issue 23: an absolute ε = 1e-6 gave 1.2e-3 relative error at D 8, weight std 0.02)."""

import pytest
import torch

from energyformer.blocks.intrinsic_newton import build_mha2nd, build_mha2nd1st, MHA2ndConfig, MHA2nd1stConfig
from energyformer.blocks.registry import SublayerSpec
from energyformer.energies.newton import NewtonHeads


def _pinv_error(e: NewtonHeads) -> float:
    P = e.wq.weight.detach().double().view(e.heads, e.head_dim, e.dim)
    want = torch.linalg.pinv(P).transpose(-1, -2).reshape(e.heads * e.head_dim, e.dim)  # (P_h^+)^T stacked
    got = e.pinv_rows().detach().double()
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("dim,heads", [(8, 2), (128, 4)])
@pytest.mark.parametrize("std", [0.02, 1.0, 100.0])
def test_pinv_is_accurate_at_every_weight_scale(dim, heads, std):
    torch.manual_seed(0)
    e = NewtonHeads(dim, heads)
    with torch.no_grad():
        e.wq.weight.normal_(0, std)
    assert _pinv_error(e) < 1e-5  # float32 (absolute eps = 1e-6: 2e-3 at D 8, std 0.02)
    assert _pinv_error(e.double()) < 1e-12


def test_pinv_eps_is_relative_and_a_config_key():
    spec = SublayerSpec(dim=8, heads=2)
    e = build_mha2nd1st(MHA2nd1stConfig(pinv_eps=1e-3), spec).energy
    assert e.pinv_eps == 1e-3 and build_mha2nd(MHA2ndConfig(pinv_eps=0.0), spec).energy.pinv_eps == 0.0
    e = e.double()
    errs = []
    for std in (1e-3, 1.0, 1e3):  # the same relative bias at any scale of W_Q
        torch.manual_seed(1)
        with torch.no_grad():
            e.wq.weight.normal_(0, std)
        errs.append(_pinv_error(e))
    assert 1e-6 < errs[0] and max(errs) / min(errs) < 1.0 + 1e-6


def test_pinv_of_a_zero_head_is_zero_not_nan():
    e = NewtonHeads(8, 2)
    with torch.no_grad():
        e.wq.weight.zero_()
    assert torch.equal(e.pinv_rows(), torch.zeros(8, 8))
