"""Scoring predicted Sudoku grids, and the givens histogram every data set reports.

Scores (``pred``, ``puzzles``, ``solutions``: ``(n, 81)``, numpy or torch, 0 = blank):

* **board accuracy** — fraction of puzzles solved completely. With solutions: ``pred`` equals the
  solution in all 81 cells. Without (published sets that give only puzzles): ``pred`` is a complete,
  valid grid that keeps every given (:func:`~energyformer.data.sudoku_grid.is_solution`); for
  puzzles with a unique solution the two definitions agree.
* **cell accuracy** — fraction of the *blank* cells (over the whole batch) predicted correctly;
  needs solutions.

The paper (Hyper-SET §5.1, after Palm et al. and Yang et al.) reports board accuracy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from energyformer.data.sudoku_grid import as_grids, is_solution


def _checked(pred: Any, puzzles: Any, solutions: Any = None):
    p = as_grids(pred, "pred")
    q = as_grids(puzzles, "puzzles")
    if p.shape != q.shape:
        raise ValueError(f"pred {p.shape} and puzzles {q.shape} differ in shape")
    s = None
    if solutions is not None:
        s = as_grids(solutions, "solutions")
        if s.shape != q.shape:
            raise ValueError(f"solutions {s.shape} and puzzles {q.shape} differ in shape")
    return p, q, s


def solved(pred: Any, puzzles: Any, solutions: Any = None) -> np.ndarray:
    """``(n,)`` bool: puzzle ``i`` is solved by ``pred[i]`` (definition in the module docstring)."""
    p, q, s = _checked(pred, puzzles, solutions)
    if s is None:
        return is_solution(p, q)
    return (p == s).all(axis=1)


def board_accuracy(pred: Any, puzzles: Any, solutions: Any = None) -> float:
    """Fraction of puzzles solved completely (exact match with solutions, else valid + givens kept)."""
    ok = solved(pred, puzzles, solutions)
    return float(ok.mean()) if ok.size else float("nan")


def cell_accuracy(pred: Any, puzzles: Any, solutions: Any) -> float:
    """Fraction of blank cells of ``puzzles`` where ``pred`` equals ``solutions`` (pooled)."""
    if solutions is None:
        raise ValueError("cell accuracy needs solutions; without them use board_accuracy "
                         "(validity against the givens)")
    p, q, s = _checked(pred, puzzles, solutions)
    blank = q == 0
    n = int(blank.sum())
    return float((p == s)[blank].sum() / n) if n else float("nan")


def score_sudoku(pred: Any, puzzles: Any, solutions: Any = None) -> dict[str, float]:
    """``{'n', 'board_accuracy', 'valid_fraction'[, 'cell_accuracy']}`` of a batch of predictions.

    ``valid_fraction`` is always the validity score (complete, valid, givens kept), so it can be
    compared between sets with and without solutions. ``cell_accuracy`` needs solutions and at least one
    blank cell: puzzles given complete have no cell to fill (it is left out, not NaN, which a caller would
    take for a model giving inf/NaN).
    """
    p, q, s = _checked(pred, puzzles, solutions)
    valid = is_solution(p, q)
    out = {"n": int(q.shape[0]),
           "board_accuracy": board_accuracy(p, q, s),
           "valid_fraction": float(valid.mean()) if valid.size else float("nan")}
    if s is not None and bool((q == 0).any()):
        out["cell_accuracy"] = cell_accuracy(p, q, s)
    return out


# ------------------------------------------------------------------------------------------------
# givens histogram
# ------------------------------------------------------------------------------------------------

def givens_histogram(puzzles: Any) -> dict[int, int]:
    """``{number of givens: number of puzzles}``, sorted by givens, only counts > 0."""
    counts = Counter((as_grids(puzzles, "puzzles") != 0).sum(axis=1).tolist())
    return {int(k): int(v) for k, v in sorted(counts.items())}


def format_givens_histogram(hist: dict[int, int], style: str = "line") -> str:
    """Render :func:`givens_histogram`'s result.

    ``style='line'``: ``givens 17-34 (n=1000, mean 25.5): 17:52 18:60 ...`` — one line for logs and
    reports. ``style='markdown'``: a two-column table ``| givens | puzzles |`` with a total row.
    """
    if style not in ("line", "markdown"):
        raise ValueError(f"style = {style!r}: allowed values are 'line', 'markdown'")
    n = sum(hist.values())
    if style == "line":
        if n == 0:
            return "givens: empty data set (n=0)"
        lo, hi = min(hist), max(hist)
        mean = sum(k * v for k, v in hist.items()) / n
        span = f"{lo}" if lo == hi else f"{lo}-{hi}"
        body = " ".join(f"{k}:{v}" for k, v in sorted(hist.items()))
        return f"givens {span} (n={n}, mean {mean:.1f}): {body}"
    rows = ["| givens | puzzles |", "|---:|---:|"]
    rows += [f"| {k} | {v} |" for k, v in sorted(hist.items())]
    rows.append(f"| total | {n} |")
    return "\n".join(rows)
