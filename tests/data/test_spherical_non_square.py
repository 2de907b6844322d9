"""``SphericalPatchEmbedding`` on non-square images.

``n_tokens`` is ``(H / p) (W / p)``; ``decode`` checks token shapes against it. Every existing use is
square, where height and width are interchangeable, so a formula using one side twice passes them all
and only breaks (a refused decode, a wrong sequence length) on a rectangular image.
"""

from __future__ import annotations

import torch

from energyformer.data.spherical import SphericalPatchEmbedding


def test_rectangular_images_round_trip():
    """A 4x8 image with 2x2 patches: 8 tokens, and decode(encode(x)) gives the images back."""
    emb = SphericalPatchEmbedding(1, 4, 8, 2)
    assert emb.n_tokens == 8
    x = torch.randint(0, 256, (3, 1, 4, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    t = emb.encode(x)
    assert t.shape[1] == emb.n_tokens
    back = emb.decode(t)
    assert back.shape == x.shape
