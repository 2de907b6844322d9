"""Factored attention (Rende et al.): with the true (J, U, beta, h) it is the exact Potts conditional."""

import pytest
import torch

from energyformer.data.potts import random_potts
from energyformer.models import MODELS
from energyformer.models.factored import FactoredConfig


@pytest.mark.parametrize("fields", [0.0, 0.7])
def test_true_parameters_reproduce_the_exact_conditional(fields):
    pm = random_potts(7, 4, beta=1.3, seed=2, field_std=fields)
    m = MODELS.build(FactoredConfig(n_tokens=7, n_colours=4)).double()
    m.set_potts(pm.J, pm.U, pm.beta, pm.h)
    s = torch.randint(0, 4, (50, 7), generator=torch.Generator().manual_seed(0))
    idx = s.clone()
    idx[:, 3] = 4  # masking a site changes nothing for that site's own prediction
    for inp in (s, idx):
        got = torch.log_softmax(m(inp).logits, -1)
        want = pm.conditional_log_probs(s)
        torch.testing.assert_close(got[:, 3], want[:, 3], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.log_softmax(m(s).logits, -1), pm.conditional_log_probs(s))


def test_softmax_rows_and_errors():
    m = MODELS.build(FactoredConfig(n_tokens=5, n_colours=3, attention="softmax"))
    A = m.positional()
    torch.testing.assert_close(A.sum(-1), torch.ones(5))
    assert float(A.diagonal().abs().max()) == 0.0
    with pytest.raises(ValueError, match="set_potts needs attention = 'linear'"):
        m.set_potts(torch.zeros(5, 5), torch.zeros(3, 3), 1.0)
    with pytest.raises(ValueError, match="iterations = 3"):
        m(torch.zeros(2, 5, dtype=torch.long), iterations=3)
    with pytest.raises(ValueError, match=r"token ids in \[0, 9\]"):
        m(torch.tensor([[0, 1, 2, 9, 0]]))
    with pytest.raises(ValueError, match=r"shape \(batch, L = 5\)"):
        m(torch.zeros(2, 6, dtype=torch.long))
