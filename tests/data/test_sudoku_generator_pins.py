"""Edges of the Sudoku generator that the validity tests cannot see.

Every generated puzzle is checked for uniqueness and its number of givens elsewhere; these pin what a
silently wrong generator would still pass: the top of an inclusive givens range being drawn, the climb's
plateau moves, the meaning of the reported dig failure rate, and which end of a bad range an error names.
"""

from __future__ import annotations

import numpy as np
import pytest

from energyformer.data import sudoku_generator as G
from energyformer.errors import ConfigError, DataError


def test_the_high_end_of_a_givens_range_is_drawn():
    """``givens=(lo, hi)`` is inclusive: both ends occur (an off-by-one would never draw ``hi``)."""
    p, _, _ = G.generate_puzzles(24, (40, 41), seed=3)
    counts = set((p != 0).sum(axis=1).tolist())
    assert counts == {40, 41}


def test_a_climb_step_to_as_many_givens_is_taken(monkeypatch):
    """The climb accepts a trial with as many givens as the puzzle it has (``m <= n``: it moves along a plateau,
    the module docstring); refusing those moves still yields valid puzzles, only fewer targets reached, and
    no validity test sees it. Scripted digs: A (24 givens), then B (24 other givens): the next climb must start
    from B."""
    sol = G.random_full_grid(np.random.default_rng(1))
    a, b = sol.copy(), sol.copy()
    a[:57] = 0  # givens in cells 57..80
    b[24:] = 0  # givens in cells 0..23
    seen, outs = [], iter([a, b, b])

    def dig(p, order, target):
        seen.append(p.copy())
        return next(outs).copy()

    monkeypatch.setattr(G, "_dig", dig)
    monkeypatch.setattr(G, "random_full_grid", lambda rng: sol)
    with pytest.raises(DataError):
        G.generate_puzzle(np.random.default_rng(0), 22, max_grids=1, climb_steps=2)
    assert len(seen) == 3 and (seen[2][:24] != 0).all()  # B's givens, plus the two cells the climb put back


def test_dig_failure_rate_is_per_grid():
    """``dig_failure_rate`` is failures over full grids dug (its docstring), not over puzzles produced."""
    st = G.TargetStats(puzzles=2, grids=4, dig_failures=3)
    assert st.dig_failure_rate == pytest.approx(0.75)
    assert G.TargetStats().dig_failure_rate == 0.0
    assert "dig failure rate 75.0%" in G.GenerationStats({30: st}).summary()


def test_a_low_end_above_80_is_named_as_the_low_end():
    """``givens=(81, 80)``: the error names the offending low end, not an empty range for the high end."""
    with pytest.raises(ConfigError, match=r"givens \(low end\) = 81"):
        G.givens_range((81, 80))
