"""The token ids of the Potts models (``bare_sa``, ``factored``): colours 0..C−1 and the mask C."""

from __future__ import annotations

import torch
from torch import Tensor

from ..core import precision


def check_colour_ids(idx: Tensor, n_colours: int) -> None:
    """Check that every id of ``idx`` is in 0..C (C = the mask); it runs on every forward of the Potts models.

    The rule: the range is read on the host only where that read is free (``core.precision``): ids on the CPU and
    not under ``torch.compile`` or CUDA-graph capture. Those raise a one-line ValueError naming the range found and
    the range allowed (one ``aminmax``, one transfer). Ids on an accelerator (``host_read_stalls``) or under
    compile/capture (``no_host_sync``) are checked on the device instead, with ``torch._assert_async``. There is no
    host read, so the host keeps queueing the forward. A bad id still stops the run at the device's next sync
    (a device-side assertion; CUDA drops the message), never a silent wrong answer: a negative index would wrap
    to the last colour. The old per-forward ``.tolist()`` drained the device's queue at every step and broke
    compiled graphs. For the clear message on a GPU, check the CPU batch first: ``check_colour_ids(ids.cpu(), C)``."""
    if idx.numel() == 0:
        return
    lo, hi = torch.aminmax(idx)
    allowed = f"allowed 0..{n_colours - 1} (colours) and {n_colours} (mask)"
    if precision.host_read_stalls(idx) or precision.no_host_sync(idx):
        torch._assert_async((lo >= 0) & (hi <= n_colours), f"a token id is out of range; {allowed}")
        return
    lo, hi = torch.stack((lo, hi)).tolist()
    if lo < 0 or hi > n_colours:
        raise ValueError(f"token ids in [{lo}, {hi}]; {allowed}")
