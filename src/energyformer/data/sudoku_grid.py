"""Sudoku grids as arrays: geometry, conversion to/from strings, vectorised validity checks.

Representation used by every ``sudoku_*`` module: a grid is a flat row-major array of 81 cells,
``0`` = blank and ``1..9`` = digits; a batch is ``(n, 81)``. Cell ``i`` lies in row ``i // 9``,
column ``i % 9`` and box ``3 * (i // 27) + (i % 9) // 3``. Functions accept numpy arrays, torch
tensors or nested lists; checks are vectorised over the batch (about a microsecond a grid).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _units() -> np.ndarray:
    rows = [[9 * r + c for c in range(9)] for r in range(9)]
    cols = [[9 * r + c for r in range(9)] for c in range(9)]
    boxes = [[9 * (3 * br + r) + 3 * bc + c for r in range(3) for c in range(3)]
             for br in range(3) for bc in range(3)]
    return np.array(rows + cols + boxes, dtype=np.int64)


UNITS: np.ndarray = _units()
"""``(27, 9)`` cell indices of the 9 rows, then the 9 columns, then the 9 boxes."""


def _peers() -> np.ndarray:
    peers = np.empty((81, 20), dtype=np.int64)
    for i in range(81):
        peers[i] = sorted({int(j) for u in UNITS if i in u for j in u} - {i})
    return peers


PEERS: np.ndarray = _peers()
"""``(81, 20)`` the cells sharing a row, column or box with each cell."""

BLANK_CHARS = ".0"
"""Characters read as a blank cell."""


def as_grids(grids: Any, name: str = "grids") -> np.ndarray:
    """``grids`` (``(81,)`` or ``(n, 81)``; numpy, torch or lists) as an ``(n, 81)`` int8 array.

    Raises ``ValueError`` naming ``name`` for a wrong shape or values outside ``0..9``.
    """
    if hasattr(grids, "detach"):  # torch tensor
        grids = grids.detach().cpu().numpy()
    a = np.asarray(grids)
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != 81:
        raise ValueError(f"{name} must have shape (81,) or (n, 81), got {tuple(np.shape(grids))}")
    if a.dtype.kind not in "iub":
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > 9):
        raise ValueError(f"{name} must hold 0 (blank) or digits 1..9, found values in "
                         f"[{int(a.min())}, {int(a.max())}]")
    return np.ascontiguousarray(a, dtype=np.int8)


def grid_from_string(s: str) -> np.ndarray:
    """An 81-character string (digits, ``.`` or ``0`` for blanks) as an ``(81,)`` int8 array."""
    if len(s) != 81:
        raise ValueError(f"a Sudoku string has 81 characters, got {len(s)}")
    bad = sorted({ch for ch in s if ch not in "123456789" + BLANK_CHARS})
    if bad:
        raise ValueError(f"bad characters {''.join(bad)!r}: allowed are 1-9 and '.' or '0' for blanks")
    return np.array([0 if ch in BLANK_CHARS else int(ch) for ch in s], dtype=np.int8)


def grid_to_string(grid: Any, blank: str = ".") -> str:
    """An ``(81,)`` grid as an 81-character string with ``blank`` (``'.'`` or ``'0'``) for blanks."""
    if blank not in BLANK_CHARS:
        raise ValueError(f"blank = {blank!r}: allowed are '.' and '0'")
    g = as_grids(grid, "grid")
    if g.shape[0] != 1:
        raise ValueError(f"grid_to_string takes one grid, got {g.shape[0]}")
    return "".join(blank if v == 0 else str(int(v)) for v in g[0])


def format_grid(grid: Any, blank: str = ".") -> str:
    """A human-readable 9-line rendering with box separators (for messages and notebooks)."""
    s = grid_to_string(grid, blank)
    lines = []
    for r in range(9):
        if r in (3, 6):
            lines.append("------+-------+------")
        row = s[9 * r:9 * r + 9]
        lines.append(" | ".join(" ".join(row[3 * b:3 * b + 3]) for b in range(3)))
    return "\n".join(lines)


def n_givens(puzzles: Any) -> np.ndarray:
    """``(n,)`` number of filled cells of each puzzle."""
    return (as_grids(puzzles, "puzzles") != 0).sum(axis=1)


def has_conflicts(grids: Any, chunk: int = 65536) -> np.ndarray:
    """``(n,)`` bool: True where some digit appears twice in a row, column or box (blanks ignored)."""
    g = as_grids(grids)
    out = np.empty(g.shape[0], dtype=bool)
    for i in range(0, g.shape[0], chunk):
        s = np.sort(g[i:i + chunk][:, UNITS], axis=2)  # (b, 27, 9)
        out[i:i + chunk] = ((s[..., 1:] == s[..., :-1]) & (s[..., 1:] > 0)).any(axis=(1, 2))
    return out


def is_solved_grid(grids: Any) -> np.ndarray:
    """``(n,)`` bool: complete (no blank) and every row, column and box holds 1..9 once."""
    g = as_grids(grids)
    return (g != 0).all(axis=1) & ~has_conflicts(g)


def agrees_with_givens(grids: Any, puzzles: Any) -> np.ndarray:
    """``(n,)`` bool: every given of each puzzle is kept in the matching grid."""
    g = as_grids(grids)
    p = as_grids(puzzles, "puzzles")
    if g.shape != p.shape:
        raise ValueError(f"grids {g.shape} and puzzles {p.shape} differ in shape")
    return ((p == 0) | (p == g)).all(axis=1)


def is_solution(grids: Any, puzzles: Any) -> np.ndarray:
    """``(n,)`` bool: each grid is a complete valid Sudoku that keeps its puzzle's givens.

    This is how a prediction is scored when the data set has no solutions; for a puzzle with a
    unique solution it is equivalent to being equal to that solution.
    """
    return is_solved_grid(grids) & agrees_with_givens(grids, puzzles)
