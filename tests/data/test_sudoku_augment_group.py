"""The Sudoku augmentation draws from the whole validity-preserving group, not a subgroup.

Validity is kept by every permutation of lines within bands; a mistake that silently stops permuting rows
inside a band (or columns inside a stack) still yields valid grids, so validity tests cannot see it. These pin
that each kind the flags switch on actually varies, independently per band.
"""

from __future__ import annotations

import numpy as np

from energyformer.data.sudoku_augment import random_transforms


def _orders(n=200, seed=0):
    t = random_transforms(n, seed, digits=False, transpose=False, bands=False, rows=True)
    cells = t.cells.reshape(n, 9, 9)
    return cells[:, :, 0] // 9, cells[:, 0, :] % 9  # row order, column order


def test_rows_and_columns_are_permuted_within_bands_and_stacks():
    """With ``bands=False, rows=True`` bands stay in place but lines inside them move, each band on its own."""
    rows, cols = _orders()
    for order in (rows, cols):
        within = order.reshape(-1, 3, 3)
        assert (within // 3 == np.arange(3)[None, :, None]).all()  # bands/stacks fixed
        for b in range(3):
            assert len({tuple(x) for x in within[:, b] % 3}) == 6  # all 3! orders seen in each band
        assert (within[:, 0] % 3 != within[:, 1] % 3).any()  # bands permuted independently


def test_bands_and_stacks_are_permuted():
    """With ``bands=True, rows=False`` the three bands (and stacks) take all 3! orders, lines inside kept."""
    t = random_transforms(200, 1, digits=False, transpose=False, bands=True, rows=False)
    cells = t.cells.reshape(200, 9, 9)
    for order in (cells[:, :, 0] // 9, cells[:, 0, :] % 9):
        g = order.reshape(-1, 3, 3)
        assert (g % 3 == np.arange(3)).all()
        assert len({tuple(x) for x in g[:, :, 0] // 3}) == 6


def test_row_and_column_orders_are_drawn_independently():
    """The column order is its own draw, not the row order reused (which keeps validity but halves the group)."""
    rows, cols = _orders(50, 2)
    assert (rows != cols).any(axis=1).mean() > 0.5
