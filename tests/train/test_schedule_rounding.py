"""Warm-up length at a rounding boundary (train/schedule.py: ``round(warmup * total_steps)``)."""

from __future__ import annotations

import pytest

from energyformer.train import TrainConfig


@pytest.mark.parametrize("kind", ["warmup_cosine", "warmup_linear", "constant"])
def test_warmup_steps_round_to_nearest_not_down(kind):
    """warmup 0.1 of 17 steps is round(1.7) = 2 warm-up steps, as documented; a mutant floored it to 1 and no test
    noticed (the others use fractions that give whole numbers)."""
    cfg = TrainConfig(schedule={"kind": kind, "warmup": 0.1}).schedule
    assert cfg.warmup_steps(17) == 2
    assert cfg.warmup_steps(14) == 1  # round(1.4)
    assert [cfg.factor(s, 17) for s in range(2)] == pytest.approx([0.5, 1.0])  # first step at lr / 2, then the peak
