"""What the ET builder makes of its default (mutation probe AI): test_defaults.py pins the
config values, not what the block builds from them."""

from energyformer.blocks.et import ETConfig, build_et
from energyformer.blocks.registry import SublayerSpec


def test_et_hopfield_memories_are_ratio_times_dim():
    # Pins memories = round(memories_ratio * dim): M = 4 D by default (ET), 1.5 D rounded for ratio 1.5.
    spec = SublayerSpec(dim=8, heads=2, causal=False)
    assert build_et(ETConfig(), spec).energy.terms.hopfield.xi.shape == (32, 8)
    assert build_et(ETConfig(memories_ratio=1.5), spec).energy.terms.hopfield.xi.shape == (12, 8)

