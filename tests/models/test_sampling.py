"""models/sampling.py: the tempered logits generation and MaskGIT decoding sample from."""

import torch

from energyformer.models.sampling import tempered


def test_tempered_logits_are_shifted_so_a_tiny_temperature_never_gives_nan():
    logits = torch.tensor([[3.0, 1.0, -2.0], [1e30, -1e30, 0.0]])
    out = tempered(logits, 1e-30)
    assert torch.isfinite(out.softmax(-1)).all() and out.softmax(-1).argmax(-1).tolist() == [0, 0]
    assert (logits / 1e-30).softmax(-1).isnan().any()  # what the shift avoids
    torch.testing.assert_close(tempered(logits[:1], 2.0).softmax(-1), (logits[:1] / 2.0).softmax(-1))
