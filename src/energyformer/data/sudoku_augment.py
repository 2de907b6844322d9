"""Validity-preserving Sudoku transforms (data augmentation), seeded and batched.

Each of these maps a valid grid to a valid grid, a puzzle with a unique solution to a puzzle with a
unique solution (the same transform applied to that solution), and keeps the number of givens:

* **digit relabelling**: a permutation of 1..9 (blank stays blank);
* **band permutation**: the three row bands (rows 0-2, 3-5, 6-8) in any order;
* **row permutation within each band** (independently per band);
* **stack permutation** and **column permutation within each stack** (the same for columns);
* **transpose**.

Together they generate the full validity-preserving group of 9! x 2 x (3!)^8 = 1.2e12 elements.
A transform is a cell permutation ``cells`` (``new[i] = old[cells[i]]``) plus a digit map ``digits``
(``new value = digits[old value]``, ``digits[0] = 0``); :func:`random_transforms` draws one per
grid and :func:`apply_transforms` applies it, so a puzzle and its solution get the same transform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from energyformer.data.sudoku_grid import as_grids


@dataclass
class SudokuTransforms:
    """A batch of ``n`` transforms: ``cells`` ``(n, 81)`` int64 and ``digits`` ``(n, 10)`` int8."""

    cells: np.ndarray
    digits: np.ndarray

    def __len__(self) -> int:
        return int(self.cells.shape[0])


def _line_perms(rng: np.random.Generator, n: int, groups: bool, within: bool) -> np.ndarray:
    """``(n, 9)`` row (or column) orders: bands/stacks permuted, then lines inside each."""
    base = np.tile(np.arange(3), (n, 1))
    group = rng.permuted(base, axis=1) if groups else base  # (n, 3)
    inner = np.tile(np.arange(3), (n, 3, 1))
    if within:
        inner = rng.permuted(inner, axis=2)  # (n, 3, 3), independent per band
    return (3 * group[:, :, None] + inner).reshape(n, 9)


def random_transforms(n: int, rng: np.random.Generator | int, *, digits: bool = True,
                      transpose: bool = True, bands: bool = True, rows: bool = True) -> SudokuTransforms:
    """``n`` random transforms drawn with ``rng`` (a Generator or an int seed).

    Flags switch kinds off: ``digits`` (relabelling), ``transpose`` (with probability 1/2),
    ``bands`` (band and stack order), ``rows`` (row order within bands, column order within stacks).
    """
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    row = _line_perms(rng, n, bands, rows)  # (n, 9)
    col = _line_perms(rng, n, bands, rows)
    cells = row[:, :, None] * 9 + col[:, None, :]  # (n, 9, 9): new (r, c) <- old (row[r], col[c])
    if transpose:
        flip = rng.random(n) < 0.5
        cells[flip] = cells[flip].transpose(0, 2, 1)
    dmap = np.zeros((n, 10), dtype=np.int8)
    dmap[:, 1:] = np.arange(1, 10)
    if digits:
        dmap[:, 1:] = rng.permuted(np.tile(np.arange(1, 10, dtype=np.int8), (n, 1)), axis=1)
    return SudokuTransforms(cells.reshape(n, 81).astype(np.int64), dmap)


def apply_transforms(grids: Any, t: SudokuTransforms) -> Any:
    """Apply transform ``i`` of ``t`` to grid ``i``; returns the type of ``grids`` (numpy or torch).

    ``grids``: ``(n, 81)`` (or ``(81,)`` with one transform). Torch tensors keep device and dtype.
    """
    a = as_grids(grids)
    if a.shape[0] != len(t):
        raise ValueError(f"{a.shape[0]} grids but {len(t)} transforms")
    out = np.take_along_axis(t.digits, np.take_along_axis(a, t.cells, axis=1).astype(np.int64),
                             axis=1)
    if hasattr(grids, "detach"):
        import torch
        return torch.from_numpy(out).to(device=grids.device, dtype=grids.dtype).reshape(grids.shape)
    return out.astype(np.asarray(grids).dtype, copy=False).reshape(np.shape(grids))


def augment(puzzles: Any, solutions: Any = None, *, seed: int | np.random.Generator = 0,
            **kinds: bool) -> tuple[Any, Any]:
    """Transform each puzzle (and its solution, identically) with a random transform.

    Returns ``(puzzles, solutions)`` of the input types (``solutions`` stays None when not given).
    ``seed`` is an int or a Generator; ``kinds`` are the flags of :func:`random_transforms`.
    """
    n = as_grids(puzzles, "puzzles").shape[0]
    t = random_transforms(n, seed, **kinds)
    new_p = apply_transforms(puzzles, t)
    new_s = None if solutions is None else apply_transforms(solutions, t)
    return new_p, new_s
