"""Sampling helpers shared by the language model's generation (``lm.CausalLM.generate``) and MaskGIT's
decoding (``masked_vision.maskgit_decode``)."""

from __future__ import annotations

from torch import Tensor


def tempered(logits: Tensor, temperature: float) -> Tensor:
    """``logits / temperature`` (temperature > 0) over the last axis, shifted by its maximum first: a tiny
    temperature then gives −inf for the others and 0 for the largest, never inf − inf = nan in a softmax."""
    return (logits - logits.amax(-1, keepdim=True)) / temperature
