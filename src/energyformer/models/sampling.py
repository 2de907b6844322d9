"""Sampling helpers shared by the language model's generation (``lm.CausalLM.generate``) and MaskGIT's
decoding (``masked_vision.maskgit_decode``)."""

from __future__ import annotations

from torch import Tensor


def tempered(logits: Tensor, temperature: float) -> Tensor:
    """``logits / temperature`` (temperature > 0) over the last axis, shifted by its maximum first, in float64: a
    tiny temperature then gives −inf for the others and 0 for the largest, never inf − inf = nan in a softmax.

    Float64 because the temperature is any finite positive Python float: rounded to float32, one below ~1.4e-45
    became 0 (0 / 0 = nan: sampling failed) and one above ~3.4e38 became inf (every logit 0: uniform sampling)."""
    return (logits - logits.amax(-1, keepdim=True)).double() / temperature
