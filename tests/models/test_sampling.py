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


def test_without_float64_the_tempered_logits_keep_the_limits_in_float32(monkeypatch):
    """MPS has no float64 (``.double()`` raised, so sampling failed there at every temperature > 0): the device's
    widest float is float32 (``core.precision.widest_float``), with the temperature clamped into float32's range so
    a tiny one still picks the largest logit and a huge one gives equal logits, never nan; ordinary temperatures
    agree with float64. (The MPS device is emulated: ``widest_float`` answering float32 on the CPU.)"""
    import energyformer.models.sampling as sampling
    from energyformer.core.precision import widest_float

    assert widest_float("mps") == torch.float32 and widest_float("cpu") == widest_float("cuda:1") == torch.float64
    monkeypatch.setattr(sampling, "widest_float", lambda device: torch.float32)
    logits = torch.tensor([[3.0, 1.0, -2.0], [1e30, -1e30, 0.0]])
    tiny = tempered(logits, 1e-46)
    assert tiny.dtype == torch.float32 and tiny.softmax(-1).tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert tempered(logits[:1], 1e39).softmax(-1).allclose(torch.full((1, 3), 1 / 3))
    torch.testing.assert_close(tempered(logits[:1], 0.7).softmax(-1).double(),
                               (logits[:1].double() / 0.7).softmax(-1), rtol=1e-6, atol=1e-7)


def test_a_fake_mps_tensor_is_tempered_in_float32():
    """the device decides: a (fake) MPS tensor's tempered logits are float32, a CPU tensor's float64"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert tempered(torch.empty(2, 5, device="mps"), 0.5).dtype == torch.float32
        assert tempered(torch.empty(2, 5), 0.5).dtype == torch.float64
