"""EpochBatcher: the seed reaches every generator, and a resumed batcher takes the saved seed and sizes.

The batch stream is a pure function of ``(seed, step)`` (module docstring of ``energyformer.data.batching``):
these pin the parts of that contract that the resume tests with one fixed seed cannot see.
"""

from __future__ import annotations

import pytest
import torch

from energyformer.data.batching import EpochBatcher
from energyformer.errors import DataError


def _data(n=24):
    return (torch.arange(n),)


def test_seed_changes_the_epoch_order():
    """Two seeds give two different shuffles (the permutation's generator is seeded with the batcher's seed)."""
    a = EpochBatcher(_data(), 4, seed=0)
    b = EpochBatcher(_data(), 4, seed=1)
    assert not torch.equal(a.indices(0), b.indices(0)) or not torch.equal(a.indices(1), b.indices(1))


def test_transform_generator_differs_per_step_and_repeats_per_step():
    """The augmentation generator is seeded with ``(seed, step)``: fresh randomness each batch, the same on
    a second draw of one batch (what makes a resumed run's augmentations those of the uninterrupted run)."""
    def tf(tensors, g):
        return (torch.rand(3, generator=g),)

    bat = EpochBatcher(_data(), 4, seed=3, transform=tf)
    draws = [bat.batch(k)[0] for k in range(4)]
    assert all(not torch.equal(draws[0], d) for d in draws[1:])
    assert torch.equal(bat.batch(2)[0], draws[2])


def test_resume_takes_the_saved_seed():
    """A batcher built with another seed resumes the saved stream: ``load_state_dict`` restores the seed too."""
    src = EpochBatcher(_data(), 4, seed=11)
    for _ in range(5):
        next(src)
    dst = EpochBatcher(_data(), 4, seed=0)
    dst.load_state_dict(src.state_dict())
    assert dst.seed == 11
    assert torch.equal(next(dst)[0], next(src)[0])


def test_resume_refuses_another_data_size():
    """A state saved for ``n`` examples does not load into a batcher over another number (its epochs differ)."""
    src = EpochBatcher(_data(24), 4, seed=0)
    dst = EpochBatcher(_data(28), 4, seed=0)
    with pytest.raises(DataError, match="n"):
        dst.load_state_dict(src.state_dict())


def test_fewer_examples_than_a_batch_is_refused():
    """``n < batch_size`` is a DataError at construction (an epoch would hold no full batch)."""
    with pytest.raises(DataError, match="fewer than batch_size"):
        EpochBatcher(_data(3), 4)


def test_epoch_drops_the_remainder_and_batches_are_full():
    """``n // batch_size`` full batches an epoch: with n = 10, batch 4 an epoch is 2 batches, each batch holds
    4 distinct examples, and batch 2 starts the next epoch (2 examples of each epoch's order are dropped)."""
    bat = EpochBatcher(_data(10), 4, seed=5)
    assert bat.batches_per_epoch == 2
    for k in range(6):
        idx = bat.indices(k)
        assert idx.numel() == 4 and idx.unique().numel() == 4
    assert torch.equal(bat.indices(2), bat._order(1)[:4])


def test_next_batch_starts_at_step_zero():
    """The first ``next()`` is ``batch(0)`` and advances the cursor to 1 (random access and iteration agree)."""
    bat = EpochBatcher(_data(), 4, seed=2)
    first = bat.batch(0)[0]
    assert torch.equal(next(bat)[0], first) and bat.step == 1
