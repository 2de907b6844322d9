"""``SudokuDataset`` split sizes, split seeding, givens counting and dtype of copies.

``split`` documents: fractions' rounding leftovers go to the first split, counts may not sum past the
set, the shuffle is seeded. A wrong leftover target, an unchecked over-sum (which silently truncates the
last split) or an ignored seed all still give disjoint, valid splits, so only these sizes and orders catch
them. ``n_givens`` must count every non-blank digit (1 included); ``augmented`` keeps a compact dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from energyformer.data.sudoku_dataset import SudokuDataset
from energyformer.errors import DataError


def _grid():
    return np.array([(3 * (r % 3) + r // 3 + c) % 9 + 1 for r in range(9) for c in range(9)], dtype=np.int64)


def _set(n=10, dtype=torch.long):
    sol = np.tile(_grid(), (n, 1))
    puz = sol.copy()
    for i in range(n):
        puz[i, i::11] = 0  # distinct blanks per row, so rows are distinguishable
    return SudokuDataset(puz, sol, dtype=dtype)


def test_fraction_leftovers_go_to_the_first_split():
    """5 puzzles split 0.5/0.5: floor gives 2+2, the leftover one goes to the first split (documented)."""
    out = _set(5).split({"a": 0.5, "b": 0.5})
    assert (len(out["a"]), len(out["b"])) == (3, 2)


def test_counts_summing_past_the_set_are_refused():
    """Counts 4+4 of 5 puzzles: refused, not a silently truncated second split."""
    with pytest.raises(DataError, match="sum to <= 5"):
        _set(5).split({"a": 4, "b": 4})


def test_split_shuffle_follows_the_seed():
    """Two seeds give different splits; one seed gives the same split twice."""
    d = _set(10)
    first = [d.split({"a": 5, "b": 5}, seed=s)["a"].puzzles for s in (0, 0, 1)]
    assert torch.equal(first[0], first[1])
    assert not torch.equal(first[0], first[2])


def test_n_givens_counts_every_digit():
    """A full grid has 81 givens, ones included; a blank cell is not a given."""
    d = SudokuDataset(np.stack([_grid(), np.where(_grid() == 1, 0, _grid())]))
    assert d.n_givens().tolist() == [81, 72]


def test_augmented_copy_keeps_the_dtype():
    """A uint8 set (8x smaller, documented) stays uint8 after augmentation."""
    d = _set(3, dtype=torch.uint8)
    a = d.augmented(seed=1)
    assert a.puzzles.dtype == torch.uint8 and a.solutions.dtype == torch.uint8
