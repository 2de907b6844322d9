"""EvalWindows scores a remainder of exactly one target (the shortest tail window).

The coverage test's sizes leave remainders of 0 and 9 targets; a tail of one target is the edge an off-by-one
in the remainder condition drops, leaving bits-per-byte computed over fewer targets than ``n_bytes`` counts.
"""

from __future__ import annotations

import torch

from energyformer.data.text import EvalWindows


def test_a_single_leftover_target_is_scored():
    """22 tokens, seq_len 10: 21 targets = two full windows + a (1, 1) window holding target data[21]."""
    data = torch.arange(22)
    w = EvalWindows(data, seq_len=10, batch_size=2)
    batches = list(w)
    assert len(batches) == len(w) == 2
    ys = torch.cat([y.reshape(-1) for _, y in batches])
    assert torch.equal(ys, data[1:])
    x_last, y_last = batches[-1]
    assert x_last.tolist() == [[20]] and y_last.tolist() == [[21]]
