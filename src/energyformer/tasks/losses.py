"""Loss helpers shared by the tasks that score only some positions (masked sites, masked image codes)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..core.precision import at_least_float32

#: the target of the positions a loss leaves out: ``F.cross_entropy`` drops it from the sum and the count
IGNORE = -100


def masked_cross_entropy(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Mean cross-entropy over the masked positions only, ``Σ_masked −log p(t_i) / #masked``: logits (B, N, C),
    targets and bool mask (B, N); NaN when nothing is masked (0 / 0, the mean of no positions). The unmasked
    targets are set to :data:`IGNORE`: the same mean as ``cross_entropy(logits[mask], targets[mask])``, without
    boolean indexing's ``nonzero`` (a host sync on an accelerator, twice per step plus once in the backward).
    Potts masked-site prediction (bare self-attention's task) and MaskGIT's loss (Eq. 1; Hyper-SET App. D.4)."""
    tgt = targets.masked_fill(~mask, IGNORE)
    return F.cross_entropy(at_least_float32(logits).flatten(0, 1), tgt.flatten(), ignore_index=IGNORE)
