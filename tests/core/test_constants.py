"""Fixed temperatures and slopes are exact in every dtype (issue 23: a float32 buffer moved to float64
kept float32's rounding, T = 0.7 -> 0.7 - 1.2e-8, sqrt(32) off by 9.7e-8)."""

import math

import pytest
import torch

from energyformer.core.constants import ExactConstant
from energyformer.energies.free_energy import MultiHeadFreeEnergy
from energyformer.energies.interaction import InteractionEnergy
from energyformer.energies.newton import HeadTemperature, NewtonHeads


def _exact(values, dtype):
    return torch.tensor(values, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_exact_constant_is_the_correctly_rounded_value_after_any_conversion(dtype):
    c = ExactConstant([0.7, math.sqrt(32)])
    assert c().dtype == torch.get_default_dtype()
    for conv in (lambda m: m.to(dtype), lambda m: m.float().to(dtype), lambda m: m.double().to(dtype)):
        v = conv(ExactConstant([0.7, math.sqrt(32)]))()
        assert v.dtype == dtype and torch.equal(v, _exact([0.7, math.sqrt(32)], dtype))
    assert not dict(c.state_dict())  # not persistent: checkpoints unchanged


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_exact_constant_rounded_floats_are_the_buffers_values(dtype):
    """``rounded()``: the buffer's numbers as Python floats without reading the buffer (no device read on a
    GPU), in the buffer's dtype after every conversion."""
    c = ExactConstant([0.7, math.sqrt(32), 2 ** -0.5])
    for _ in range(2):  # the cached tuple follows the conversion
        c = c.to(dtype)
        assert c.rounded() == tuple(c().tolist()) and c.rounded() == tuple(_exact(c.values, dtype).tolist())
        c = c.to(torch.float32)
        assert c.rounded() == tuple(c().tolist())


def test_fixed_free_energy_temperature_is_exact_in_float64():
    e = MultiHeadFreeEnergy(64, 2, temperature=0.7).double()
    assert e.temperature.dtype == torch.float64 and bool((e.temperature == 0.7).all())
    e = MultiHeadFreeEnergy(64, 2).double()  # default sqrt(d_h) = sqrt(32)
    assert bool((e.temperature == math.sqrt(32)).all())
    assert "fixed_temperature.value" not in e.state_dict()


def test_fixed_newton_temperatures_are_exact_and_learned_ones_unchanged():
    t = HeadTemperature(3, 0.7, learn=False).double()
    assert torch.equal(t(), torch.full((3,), 0.7, dtype=torch.float64))
    e = NewtonHeads(16, 2, learn_temperature=False).double()  # sqrt(8)
    assert torch.equal(e.temp_score(), torch.full((2,), math.sqrt(8), dtype=torch.float64))
    learned = HeadTemperature(3, 0.7, learn=True)
    assert [n for n, _ in learned.named_parameters()] == ["theta"]


def test_alibi_slopes_are_exact_for_any_head_count():
    e = InteractionEnergy(24, 6, alibi=True).double()  # 6 heads: slopes 2^(-8k/4), then 2^(-(2k-1)/2)
    want = [2.0 ** (-8.0 * (k + 1) / 4) for k in range(4)] + [2.0 ** (-8.0 * (k + 1) / 8) for k in range(8)][0::2][:2]
    assert torch.equal(e.slopes, torch.tensor(want, dtype=torch.float64))
    assert InteractionEnergy(24, 6, alibi=False).slopes is None


# ----------------------------------------------------------------------------- computed tables
def test_sinusoidal_positions_are_exact_after_double():
    """The table was a float32 buffer, so ``.double()`` kept float32's rounding (~1e-8)."""
    from energyformer.models.wrapper import SinusoidalPositions, sinusoid_table

    pe = SinusoidalPositions(64, 32).double()
    assert pe().dtype == torch.float64
    assert torch.equal(pe(), sinusoid_table(64, 32))
    assert torch.equal(pe.float()(), sinusoid_table(64, 32).float())  # back: correctly rounded again
    assert not list(pe.state_dict())  # not a parameter, not saved


def test_step_network_frequencies_are_exact_after_double():
    from energyformer.core.stepsize import NetworkStepSize, timestep_freqs

    net = NetworkStepSize(8, embed_dim=16).double()
    assert torch.equal(net.freqs(), timestep_freqs(8, 10000.0))
    assert not any("freqs" in k for k in net.state_dict())


def test_exact_table_refuses_a_low_precision_make():
    from energyformer.core.constants import ExactTable

    with pytest.raises(TypeError, match="float64"):
        ExactTable(lambda: torch.zeros(3))


def test_exact_constant_built_on_the_meta_device_still_knows_its_floats():
    """Hugging Face's from_pretrained builds modules inside a meta-device context: the buffer is a meta tensor,
    the floats are still worked out on the CPU (an export of a CEM model failed here once)."""
    with torch.device("meta"):
        c = ExactConstant([0.7, 2 ** -0.5])
    assert c().is_meta and c.rounded() == tuple(_exact([0.7, 2 ** -0.5], torch.get_default_dtype()).tolist())
