"""models/sampling.py: the tempered logits generation and MaskGIT decoding sample from."""

import torch

from energyformer.models.sampling import tempered


def test_tempered_logits_are_shifted_so_a_tiny_temperature_never_gives_nan():
    logits = torch.tensor([[3.0, 1.0, -2.0], [1e30, -1e30, 0.0]])
    out = tempered(logits, 1e-30)
    assert torch.isfinite(out.softmax(-1)).all() and out.softmax(-1).argmax(-1).tolist() == [0, 0]
    assert (logits / 1e-30).softmax(-1).isnan().any()  # what the shift avoids
    torch.testing.assert_close(tempered(logits[:1], 2.0).softmax(-1), (logits[:1].double() / 2.0).softmax(-1))


def test_tempered_is_float64_so_any_finite_positive_temperature_works():
    """1e-46 and 1e39 are finite Python floats float32 rounds to 0 and inf (nan / all-equal logits before)."""
    logits = torch.tensor([[3.0, 1.0, -2.0]])
    tiny = tempered(logits, 1e-46).softmax(-1)
    assert tiny.dtype == torch.float64 and tiny.tolist() == [[1.0, 0.0, 0.0]]
    huge = tempered(logits, 1e39)
    assert huge[0, 1] < 0 and huge[0, 2] < huge[0, 1]  # still ordered (float32 made them all 0)
