"""The generated-Sudoku cache key and the cross-split duplicate check of ``load_generated_sudoku``.

The cache is reused whenever the key matches, so the key must change with ``GENERATOR_VERSION`` (else a
changed generator silently serves old data); and generation must refuse a solution grid that lands in two
splits (a test puzzle seen in training). Neither shows up with a real generator run at test sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

from energyformer.data import sudoku as S
from energyformer.data.sudoku_generator import GenerationStats
from energyformer.errors import DataError


def test_cache_key_follows_the_generator_version(monkeypatch):
    """Bumping ``GENERATOR_VERSION`` changes the key (and so the cache file name)."""
    cfg = S.SudokuGenConfig(n_train=1, n_validation=1, n_test=1)
    before = cfg.cache_key()
    monkeypatch.setattr(S, "GENERATOR_VERSION", S.GENERATOR_VERSION + 1)
    assert cfg.cache_key() != before


def test_a_solution_in_two_splits_is_refused(monkeypatch):
    """The same solution grid in train and validation raises, naming both splits."""
    sol = np.array([(3 * (r % 3) + r // 3 + c) % 9 + 1 for r in range(9) for c in range(9)], dtype=np.int8)
    puz = sol.copy()
    puz[:40] = 0

    def fake(sizes, *a, **k):
        return [(np.tile(puz, (n, 1)), np.tile(sol, (n, 1)), GenerationStats()) for n in sizes]

    monkeypatch.setattr(S, "generate_streams", fake)
    with pytest.raises(DataError, match="occurs in train and validation"):
        S.load_generated_sudoku(S.SudokuGenConfig(n_train=1, n_validation=1, n_test=0, givens=(30, 45)), cache=False)
