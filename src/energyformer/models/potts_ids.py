"""The token ids of the Potts models (``bare_sa``, ``factored``): colours 0..C−1 and the mask C."""

from __future__ import annotations

import torch
from torch import Tensor


def check_colour_ids(idx: Tensor, n_colours: int) -> None:
    """Raise a one-line ValueError when an id of ``idx`` is outside 0..C (C = the mask), naming the range found.

    One ``aminmax`` and one host transfer per call (it runs on every forward: ``int(idx.min())`` and
    ``int(idx.max())`` were two syncs on a GPU)."""
    if idx.numel() == 0:
        return
    lo, hi = torch.stack(torch.aminmax(idx)).tolist()
    if lo < 0 or hi > n_colours:
        raise ValueError(f"token ids in [{lo}, {hi}]; allowed 0..{n_colours - 1} (colours) and {n_colours} (mask)")
