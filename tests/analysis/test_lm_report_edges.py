"""lm_report reducers at edges test_lm_report.py leaves open (seed §4.3, Fig. 3a)."""

import math

from energyformer.analysis.lm_report import akima_log2_lr, akima_loss


def test_akima_reducers_need_three_rates():
    """"None below three rates": two rates are no interpolant (they returned the lower of the two losses)."""
    assert akima_loss(["0.1", "0.2"], [1.0, 2.0]) is None
    assert akima_log2_lr(["0.1", "0.2"], [1.0, 2.0]) is None


def test_akima_log2_lr_is_in_octaves():
    """akima_log2_lr: log2 of the optimal rate. Losses (log2 lr - 1)^2 over lr 0.5 … 8: optimum lr 2, log2 = 1."""
    lrs = [0.5, 1.0, 2.0, 4.0, 8.0]
    v = akima_log2_lr([str(x) for x in lrs], [(math.log2(x) - 1) ** 2 for x in lrs])
    assert abs(v - 1.0) < 0.02
