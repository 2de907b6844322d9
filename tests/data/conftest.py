"""Fixtures shared by the data tests."""

from __future__ import annotations

import pytest

from energyformer.data import sudoku as S


@pytest.fixture(scope="module")
def small_set():
    """Eight generated Sudoku puzzles with 25-32 givens and their solutions (numpy arrays, (8, 81))."""
    p, s, _ = S.generate_puzzles(8, (25, 32), seed=2, chunk_size=4)
    return p, s
