"""Spherical pixel embedding: exact round trip, unit tokens, orthogonal F (and bare attention's
equivariance under it), corruption, errors."""

import math

import pytest
import torch

from energyformer.data.spherical import (
    SphericalPatchEmbedding, circle_to_pixels, corrupt, orthogonal_matrix, overlap, pixels_to_circle,
)
from energyformer.energies.pseudolikelihood import bare_step


def _images(B=3, C=3, H=8, W=8, seed=0):
    return torch.randint(0, 256, (B, C, H, W), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


@pytest.mark.parametrize("mixing", ["orthogonal", "none"])
def test_round_trip_and_unit_tokens(mixing):
    emb = SphericalPatchEmbedding(3, 8, 8, 4, mixing=mixing, seed=1)
    assert (emb.n_tokens, emb.dim) == (4, 96)
    img = _images()
    x = emb.encode(img)
    torch.testing.assert_close(x.norm(dim=-1), torch.ones(3, 4), rtol=1e-6, atol=1e-6)
    assert float((emb.decode(x) - img.float()).abs().max()) < 1e-3
    torch.testing.assert_close(emb.F @ emb.F.T, torch.eye(96), rtol=0, atol=1e-5)


def test_angle_map_and_projection():
    v = torch.tensor([0.0, 1.0, 127.0, 255.0], dtype=torch.float64)
    e = pixels_to_circle(v)
    torch.testing.assert_close(circle_to_pixels(e), v, rtol=0, atol=1e-10)
    assert circle_to_pixels(torch.tensor([[1.0, -0.1], [-1.0, -0.1]])).tolist() == [0.0, 255.0]


def test_corruption():
    img = _images(B=20)
    g = torch.Generator().manual_seed(0)
    noisy = corrupt(img, 0.3, "replace", generator=g)
    frac = float((noisy != img.float()).double().mean())
    assert abs(frac - 0.3) < 0.03 and float(noisy.min()) >= 0 and float(noisy.max()) <= 255
    gauss = corrupt(img, 0.2, "gaussian", generator=g)
    assert float(gauss.min()) >= 0 and float(gauss.max()) <= 255
    torch.testing.assert_close(corrupt(img, 0.0, "replace"), img.float())
    with pytest.raises(ValueError, match="replaced fraction"):
        corrupt(img, 1.5)


def test_bare_attention_is_equivariant_under_orthogonal_mixing():
    """Dynamics on F x with J equal (F times) the dynamics on x with Fᵀ J F: an orthogonal F only
    changes the basis J is written in."""
    N, d = 4, 6
    g = torch.Generator().manual_seed(0)
    F = orthogonal_matrix(d, 3).double()
    J = torch.randn(N, N, d, d, generator=g, dtype=torch.float64)
    x = torch.randn(2, N, d, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    JF = torch.einsum("ba,ijbc,cd->ijad", F, J, F)  # Fᵀ J_ij F
    torch.testing.assert_close(bare_step(x @ F.T, J) @ F, bare_step(x, JF))
    torch.testing.assert_close(overlap(x, x), torch.ones(2, dtype=torch.float64))


def test_errors():
    with pytest.raises(ValueError, match="patch = 3: must divide"):
        SphericalPatchEmbedding(1, 8, 8, 3)
    emb = SphericalPatchEmbedding(1, 8, 8, 2)
    with pytest.raises(ValueError, match=r"expected \(batch, 1, 8, 8\)"):
        emb.encode(_images(C=3))
    with pytest.raises(ValueError, match="allowed values are"):
        SphericalPatchEmbedding(1, 8, 8, 2, mixing="random")
    assert math.isclose(float(pixels_to_circle(torch.tensor(255.0))[0]), -1.0, abs_tol=1e-6)
