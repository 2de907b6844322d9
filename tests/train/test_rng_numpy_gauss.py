"""``get_rng_state`` / ``set_rng_state`` keep NumPy's cached Gaussian.

NumPy's legacy global generator draws normals in pairs and caches the second (``has_gauss``, ``gauss``).
A snapshot taken between the two must restore the cached value too, or the first ``np.random.randn()``
after a resume differs from the uninterrupted run. ``rand``-only round trips never see it.
"""

from __future__ import annotations

import numpy as np

from energyformer.train.rng import get_rng_state, seed_everything, set_rng_state


def test_pending_numpy_gaussian_survives_a_round_trip():
    """One normal drawn (one cached): the next normals after restore equal those without it."""
    seed_everything(5)
    np.random.randn()
    st = get_rng_state()
    assert st["numpy"]["has_gauss"] == 1
    want = np.random.randn(3)
    set_rng_state(st)
    assert np.array_equal(np.random.randn(3), want)
