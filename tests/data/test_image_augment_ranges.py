"""Ranges of the image augmentations and the seeding of ``ImageDataset.subset``.

A crop that never reaches the far offset (``2 * padding``), a flip applied with probability ``1 - p``
instead of ``p``, or a subset that ignores its seed all still produce images of the right shape and
dtype, so shape tests pass; these pin the documented distributions.
"""

from __future__ import annotations

import torch

from energyformer.data.images import (Augment, ImageDataset, ImageSplit, Normalization, random_crop,
                                      random_hflip)


def test_random_crop_offsets_cover_zero_to_two_padding():
    """Padding 1 on a 4x4 image: every window offset 0..2 occurs on both axes (the pad is cropped from
    either side)."""
    x = torch.arange(1, 17, dtype=torch.uint8).reshape(1, 1, 4, 4).repeat(300, 1, 1, 1)
    y = random_crop(x, 1, torch.Generator().manual_seed(0))
    pos = (y[:, 0] == 6).flatten(1).float().argmax(dim=1)  # x[1, 1] = 6 lands at (2 - oy, 2 - ox)
    oy, ox = 2 - pos // 4, 2 - pos % 4
    assert set(oy.tolist()) == {0, 1, 2} and set(ox.tolist()) == {0, 1, 2}


def test_hflip_probability_is_p():
    """``p=0`` never flips, ``p=1`` always does, ``p=0.2`` flips about a fifth of the images."""
    x = torch.arange(2, dtype=torch.uint8).reshape(1, 1, 1, 2).repeat(1000, 1, 1, 1)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(random_hflip(x, g, p=0.0), x)
    assert torch.equal(random_hflip(x, g, p=1.0), x.flip(-1))
    frac = (random_hflip(x, g, p=0.2)[:, 0, 0, 0] == 1).float().mean().item()
    assert 0.15 < frac < 0.25


def _ds(n=40):
    def split(k):
        return ImageSplit(torch.arange(k, dtype=torch.uint8).reshape(k, 1, 1, 1), torch.zeros(k, dtype=torch.long))
    return ImageDataset("tiny", split(n), split(4), split(4), ("a",), Normalization((0.0,), (1.0,)), Augment())


def test_subset_follows_its_seed():
    """The same seed draws the same subset; another seed draws another one."""
    d = _ds()
    picks = [d.subset("train", 10, seed=s).train.images.flatten().tolist() for s in (0, 0, 1)]
    assert picks[0] == picks[1] and picks[0] != picks[2]
