"""Sampling helpers shared by the language model's generation (``lm.CausalLM.generate``) and MaskGIT's
decoding (``masked_vision.maskgit_decode``)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.precision import widest_float

#: float32's safe temperatures (MPS, which has no float64): a logit gap up to ~1e8 over 1e-30 stays finite, and
#: over 1e30 any float32 logit gap is 0 anyway, as it is in float64 to float32's precision
_FLOAT32_TEMPERATURES = (1e-30, 1e30)


def tempered(logits: Tensor, temperature: float) -> Tensor:
    """``logits / temperature`` (temperature > 0) over the last axis, shifted by its maximum first, in float64: a
    tiny temperature then gives −inf for the others and 0 for the largest, never inf − inf = nan in a softmax.

    Float64 because the temperature is any finite positive Python float: rounded to float32, one below ~1.4e-45
    became 0 (0 / 0 = nan: sampling failed) and one above ~3.4e38 became inf (every logit 0: uniform sampling).
    On MPS (no float64: ``.double()`` was a TypeError, so sampling failed there at every temperature > 0) float32,
    with the temperature clamped into the range where float32 keeps those limits."""
    dt = widest_float(logits.device)
    lo, hi = _FLOAT32_TEMPERATURES
    t = temperature if dt == torch.float64 else min(max(temperature, lo), hi)
    return (logits - logits.amax(-1, keepdim=True)).to(dt) / t
