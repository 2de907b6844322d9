"""EqT's memory energy (energies/coherence_pointwise.py, ``coherence_mem``) against its formulas: ℒ_mem =
−log Σ_i r_i exp(cos(h, z_i)/τ) (EqT Eq. 15) and the bank's EMA write (Eq. 16). The registry-driven property tests
(gradient = autograd, a small step lowers it) cannot see a wrong τ or a wrong write: these check the numbers."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.energies.coherence import CoherenceContext
from energyformer.energies.coherence_pointwise import MemoryEnergy

DT = torch.float64


def _cos(h, bank):
    return F.normalize(h, dim=-1) @ F.normalize(bank, dim=-1).t()  # (B, N, M)


@pytest.mark.parametrize("tau", [None, 0.5])
def test_memory_energy_is_minus_logsumexp_of_cosines_over_tau(tau):
    """τ = 0.1 unless given (our choice, ``RefineConfig.mem_tau``); every slot relevant ('all')."""
    torch.manual_seed(0)
    e = (MemoryEnergy(8, size=6) if tau is None else MemoryEnergy(8, size=6, tau=tau)).to(DT)
    h = torch.randn(2, 3, 8, dtype=DT)
    want = -torch.logsumexp(_cos(h, e.bank) / (0.1 if tau is None else tau), -1)
    torch.testing.assert_close(e.energy(h, e.prepare(None)), want, rtol=1e-12, atol=1e-12)


def test_topk_relevance_sums_over_the_proposals_nearest_slots_only():
    torch.manual_seed(1)
    e = MemoryEnergy(8, size=6, tau=0.3, relevance="topk", topk=2).to(DT)
    f, h = torch.randn(1, 4, 8, dtype=DT), torch.randn(1, 4, 8, dtype=DT)
    near = _cos(f, e.bank).topk(2, -1).indices  # (1, 4, 2): the slots the proposal f is nearest
    want = -torch.logsumexp(torch.gather(_cos(h, e.bank), -1, near) / 0.3, -1)
    got = e.energy(h, e.prepare(CoherenceContext(torch.zeros(1, 4, dtype=torch.long), f)))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_bank_write_is_an_ema_toward_the_mean_of_each_slots_tokens():
    """z_i ← ema·z_i + (1 − ema)·mean{h_t : argmax_j h_tᵀ z_j = i}: four tokens on one slot move it by their mean,
    not their sum; slots no token chose stay; padded tokens are not written."""
    torch.manual_seed(2)
    e = MemoryEnergy(4, size=3, ema=0.5).to(DT)
    z = e.bank.clone()
    h = torch.stack([z[0] * s for s in (1.0, 2.0, 3.0, 4.0)] + [z[1] * 9.0])[None]  # (1, 5, 4)
    mask = torch.tensor([[True, True, True, True, False]])  # the slot-1 token is padding
    e.update(h, mask)
    torch.testing.assert_close(e.bank[0], 0.5 * z[0] + 0.5 * 2.5 * z[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(e.bank[1:], z[1:])
