""":class:`SudokuDataset`: puzzles (and solutions) as ``(n, 81)`` integer tensors.

``0`` = blank, ``1..9`` = digits, cells in row-major order. A data set comes from the generator
(:func:`energyformer.data.sudoku.load_generated_sudoku`, cached), from a file
(:func:`energyformer.data.sudoku_io.read_sudoku`) or from tensors. It is a ``torch`` ``Dataset``
whose items are dicts (``{'puzzle': (81,), 'solution': (81,)}``; no ``'solution'`` when the set
has none), so the default ``DataLoader`` collation gives ``(B, 81)`` batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from energyformer.data.sudoku_augment import augment
from energyformer.data.sudoku_grid import agrees_with_givens, as_grids, has_conflicts, is_solved_grid
from energyformer.data.sudoku_metrics import (
    format_givens_histogram, givens_histogram, score_sudoku,
)
from energyformer.errors import DataError
from energyformer.utils.validate import check_int


class SudokuDataset(torch.utils.data.Dataset):
    """Sudoku puzzles with optional solutions, sources and ratings.

    Attributes: ``puzzles`` ``(n, 81)`` and ``solutions`` ``(n, 81)`` or None (tensors of
    ``dtype``, default ``torch.long`` — ready for ``nn.Embedding``; ``torch.uint8`` saves 8x memory
    on millions of puzzles), ``sources`` (list of str or None), ``ratings`` (``(n,)`` float64
    tensor or None; NaN where unknown), ``name`` (for messages and reports) and ``info`` (a dict of
    provenance: file, generator config and cost, ...; carried to subsets, splits and copies).
    Construction checks shapes and the 0..9 range only; :meth:`check` checks the Sudoku rules.
    """

    def __init__(self, puzzles: Any, solutions: Any = None, *, sources: Sequence[str] | None = None,
                 ratings: Any = None, name: str = "sudoku", dtype: torch.dtype = torch.long,
                 info: dict | None = None):
        p = as_grids(puzzles, "puzzles")
        self.puzzles = torch.from_numpy(p).to(dtype)
        self.solutions: torch.Tensor | None = None
        if solutions is not None:
            s = as_grids(solutions, "solutions")
            if s.shape != p.shape:
                raise DataError(f"{name}: solutions {s.shape} and puzzles {p.shape} differ in shape")
            self.solutions = torch.from_numpy(s).to(dtype)
        n = p.shape[0]
        self.sources = None if sources is None else [str(x) for x in sources]
        if self.sources is not None and len(self.sources) != n:
            raise DataError(f"{name}: {len(self.sources)} sources for {n} puzzles")
        self.ratings = None if ratings is None else torch.as_tensor(ratings, dtype=torch.float64)
        if self.ratings is not None and self.ratings.shape != (n,):
            raise DataError(f"{name}: ratings of shape {tuple(self.ratings.shape)} for {n} puzzles")
        self.name = name
        self.info: dict = dict(info or {})

    # ---------------------------------------------------------------------------- torch Dataset
    def __len__(self) -> int:
        return int(self.puzzles.shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {"puzzle": self.puzzles[i]}
        if self.solutions is not None:
            item["solution"] = self.solutions[i]
        return item

    def __repr__(self) -> str:
        return (f"SudokuDataset(name={self.name!r}, n={len(self)}, "
                f"solutions={self.has_solutions}, {self.describe_givens()})")

    @property
    def has_solutions(self) -> bool:
        return self.solutions is not None

    # ---------------------------------------------------------------------------- derived sets
    def subset(self, index: Any, name: str | None = None) -> SudokuDataset:
        """The puzzles at ``index`` (indices, a slice or a bool mask), with their metadata."""
        if isinstance(index, slice):
            idx = torch.arange(len(self))[index]
        else:
            idx = torch.as_tensor(index)
            if idx.dtype == torch.bool:
                idx = idx.nonzero().reshape(-1)
        idx = idx.to(torch.long).reshape(-1)
        return SudokuDataset(
            self.puzzles[idx], None if self.solutions is None else self.solutions[idx],
            sources=None if self.sources is None else [self.sources[j] for j in idx.tolist()],
            ratings=None if self.ratings is None else self.ratings[idx],
            name=name or self.name, dtype=self.puzzles.dtype, info=self.info)

    def split(self, sizes: Mapping[str, float | int], seed: int = 0) -> dict[str, SudokuDataset]:
        """Disjoint random splits, e.g. ``{'train': 0.9, 'validation': 0.05, 'test': 0.05}``.

        Values are all fractions (floats summing to at most 1; rounding leftovers go to the first
        split) or all counts (ints summing to at most ``len(self)``). The shuffle is seeded.
        """
        check_int("seed", seed, min=0)
        if not sizes:
            raise DataError("split: give at least one split, e.g. {'train': 0.9, 'test': 0.1}")
        n = len(self)
        vals = list(sizes.values())
        if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            counts = [int(v) for v in vals]
            if min(counts) < 0 or sum(counts) > n:
                raise DataError(f"split sizes {dict(sizes)} must be >= 0 and sum to <= {n}")
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            if min(vals) < 0 or sum(vals) > 1 + 1e-9:
                raise DataError(f"split fractions {dict(sizes)} must be >= 0 and sum to <= 1")
            counts = [int(np.floor(v * n)) for v in vals]
            if abs(sum(vals) - 1) < 1e-9:
                counts[0] += n - sum(counts)
        else:
            raise DataError(f"split sizes {dict(sizes)}: give all fractions or all counts")
        perm = torch.from_numpy(np.random.default_rng(seed).permutation(n))
        out, start = {}, 0
        for name, c in zip(sizes, counts):
            out[name] = self.subset(perm[start:start + c].sort().values, name=f"{self.name}/{name}")
            start += c
        return out

    def augmented(self, seed: int = 0, **kinds: bool) -> SudokuDataset:
        """A copy with each puzzle (and solution) transformed by a random validity-preserving
        transform (:func:`~energyformer.data.sudoku_augment.augment`; ``kinds`` switch kinds off)."""
        p, s = augment(self.puzzles, self.solutions, seed=seed, **kinds)
        return SudokuDataset(p, s, sources=self.sources, ratings=self.ratings,
                             name=f"{self.name}+aug{seed}", dtype=self.puzzles.dtype,
                             info={**self.info, "augmented_seed": seed})

    # ---------------------------------------------------------------------------- checks, stats
    def n_givens(self) -> torch.Tensor:
        """``(n,)`` number of givens of each puzzle."""
        return (self.puzzles != 0).sum(dim=1)

    def givens_histogram(self) -> dict[int, int]:
        """``{givens: count}`` (see :func:`~energyformer.data.sudoku_metrics.givens_histogram`)."""
        return givens_histogram(self.puzzles)

    def describe_givens(self, style: str = "line") -> str:
        """The givens histogram as one line (``style='line'``) or a Markdown table."""
        return format_givens_histogram(self.givens_histogram(), style)

    def check(self, unique: bool = False) -> None:
        """Raise :class:`DataError` naming the first bad puzzle (by index) unless: no givens
        conflict; solutions (if any) are complete valid grids keeping the givens; and, with
        ``unique=True``, every puzzle has exactly one solution (compiled solver, ~50 us a puzzle)."""
        bad = np.flatnonzero(has_conflicts(self.puzzles))
        if bad.size:
            raise DataError(f"{self.name}: puzzle {bad[0]} has conflicting givens")
        if self.solutions is not None:
            bad = np.flatnonzero(~is_solved_grid(self.solutions))
            if bad.size:
                raise DataError(f"{self.name}: solution {bad[0]} is not a complete valid grid")
            bad = np.flatnonzero(~agrees_with_givens(self.solutions, self.puzzles))
            if bad.size:
                raise DataError(f"{self.name}: solution {bad[0]} contradicts its puzzle's givens")
        if unique:
            from energyformer.data.sudoku_solver import count_solutions
            counts, _ = count_solutions(self.puzzles, limit=2)
            bad = np.flatnonzero(counts != 1)
            if bad.size:
                what = "no solution" if counts[bad[0]] == 0 else "several solutions"
                raise DataError(f"{self.name}: puzzle {bad[0]} has {what} "
                                f"({int(bad.size)} of {len(self)} puzzles are not unique)")

    def solve_missing(self) -> SudokuDataset:
        """A copy with solutions filled in by the solver; every puzzle must have exactly one."""
        if self.solutions is not None:
            return self
        from energyformer.data.sudoku_solver import count_solutions
        counts, sols = count_solutions(self.puzzles, limit=2)
        bad = np.flatnonzero(counts != 1)
        if bad.size:
            what = "no solution" if counts[bad[0]] == 0 else "several solutions"
            raise DataError(f"{self.name}: puzzle {bad[0]} has {what}; cannot fill in solutions")
        return SudokuDataset(self.puzzles, sols, sources=self.sources, ratings=self.ratings,
                             name=self.name, dtype=self.puzzles.dtype, info=self.info)

    def score(self, pred: Any) -> dict[str, float]:
        """Board (and, with solutions, cell) accuracy of ``pred`` ``(n, 81)`` on this set."""
        return score_sudoku(pred, self.puzzles, self.solutions)
