"""Sudoku data layer: solver, generator, augmentation, scoring, histogram, cache (readers/writer:
``test_sudoku_io.py``; the shared ``small_set`` fixture: ``conftest.py``).

Uniqueness and solutions are checked against ``plain_count`` below: a deliberately simple,
independent backtracking solver (Python sets, no bitmasks, no propagation) sharing no code with
the compiled one.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from energyformer.data import sudoku as S
from energyformer.data import sudoku_generator
from energyformer.errors import DataError

# Royle's first 17-given puzzle and its (unique) solution.
P17 = "000000010400000000020000000000050407008000300001090000300400200050100000000806000"
S17 = "693784512487512936125963874932651487568247391741398625319475268856129743274836159"


# ------------------------------------------------------------------------------------------------
# independent reference: plain backtracking
# ------------------------------------------------------------------------------------------------

def plain_count(grid, limit=2):
    """Count solutions up to ``limit`` by plain backtracking; returns (count, first solution)."""
    g = [int(v) for v in grid]
    found = []

    def candidates(i):
        r, c = divmod(i, 9)
        br, bc = 3 * (r // 3), 3 * (c // 3)
        used = {g[9 * r + k] for k in range(9)} | {g[9 * k + c] for k in range(9)}
        used |= {g[9 * (br + a) + bc + b] for a in range(3) for b in range(3)}
        return [d for d in range(1, 10) if d not in used]

    def valid_givens():
        for i in range(81):
            if g[i]:
                d, g[i] = g[i], 0
                ok = d in candidates(i)
                g[i] = d
                if not ok:
                    return False
        return True

    def rec():
        blanks = [i for i in range(81) if g[i] == 0]
        if not blanks:
            found.append(list(g))
            return len(found) >= limit
        i = min(blanks, key=lambda j: len(candidates(j)))
        for d in candidates(i):
            g[i] = d
            if rec():
                return True
            g[i] = 0
        g[i] = 0
        return False

    if valid_givens():
        rec()
    return len(found), (found[0] if found else None)


def plain_is_valid_solution(sol, puzzle):
    """Every row, column and box is 1..9 and the givens are kept (plain Python)."""
    s = [int(v) for v in sol]
    units = [[9 * r + c for c in range(9)] for r in range(9)] + \
        [[9 * r + c for r in range(9)] for c in range(9)] + \
        [[9 * (3 * br + a) + 3 * bc + b for a in range(3) for b in range(3)]
         for br in range(3) for bc in range(3)]
    return all(sorted(s[i] for i in u) == list(range(1, 10)) for u in units) and \
        all(int(p) in (0, v) for p, v in zip(puzzle, s))


def find_deadly_rectangle_puzzle():
    """A puzzle with exactly two solutions: a full grid minus an a-b/b-a rectangle in two boxes."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        g = S.random_full_grid(rng).reshape(9, 9)
        for r1 in range(9):
            for r2 in range(r1 + 1, 3 * (r1 // 3) + 3):  # same band: the 4 cells span two boxes
                for c1 in range(9):
                    for c2 in range(c1 + 1, 9):
                        if c1 // 3 != c2 // 3 and g[r1, c1] == g[r2, c2] and g[r1, c2] == g[r2, c1]:
                            p = g.copy()
                            p[[r1, r1, r2, r2], [c1, c2, c1, c2]] = 0
                            return p.reshape(81)
    raise AssertionError("no deadly rectangle found")


# ------------------------------------------------------------------------------------------------
# solver
# ------------------------------------------------------------------------------------------------

def test_solver_17_given_puzzle():
    n, sol = S.count_solutions(S.grid_from_string(P17))
    assert n == 1
    assert S.grid_to_string(sol) == S17
    assert plain_is_valid_solution(S17, P17)
    assert S.grid_to_string(S.solve(S.grid_from_string(P17))) == S17


def test_solver_counts_agree_with_plain_backtracking():
    unsat = np.zeros(81, dtype=np.int8)
    unsat[:8] = np.arange(1, 9)  # row 1 = 1..8, so (1, 9) must be 9 ...
    unsat[9 * 5 + 8] = 9  # ... but column 9 already has a 9: no conflict among givens, no solution
    conflict = np.zeros(81, dtype=np.int8)
    conflict[[0, 10]] = 4  # two 4s in box 1
    cases = {"unsat": unsat, "conflict": conflict, "empty": np.zeros(81, dtype=np.int8),
             "two": find_deadly_rectangle_puzzle()}
    expected = {"unsat": 0, "conflict": 0, "empty": 2, "two": 2}
    batch = np.stack(list(cases.values()))
    counts, sols = S.count_solutions(batch, limit=2)
    for (name, p), n, sol in zip(cases.items(), counts, sols):
        assert plain_count(p)[0] == expected[name] == n, name
        if n:
            assert plain_is_valid_solution(sol, p), name
        else:
            assert not sol.any(), name
    assert S.count_solutions(cases["two"], limit=5)[0] == 2 == plain_count(cases["two"], 5)[0]
    assert S.solve(unsat) is None
    assert list(S.has_unique_solution(batch)) == [False] * 4


def test_solver_rejects_bad_shapes_and_values():
    with pytest.raises(ValueError, match=r"\(n, 81\)"):
        S.count_solutions(np.zeros((2, 80), dtype=np.int8))
    with pytest.raises(ValueError, match="0 \\(blank\\) or digits 1..9"):
        S.count_solutions(np.full(81, 10))
    with pytest.raises(ValueError, match="limit"):
        S.count_solutions(np.zeros(81, dtype=np.int8), limit=0)


# ------------------------------------------------------------------------------------------------
# generator
# ------------------------------------------------------------------------------------------------

def test_generated_puzzles_are_unique_by_independent_solver():
    puzzles, solutions, stats = S.generate_puzzles(6, (24, 30), seed=3, chunk_size=3)
    assert puzzles.shape == solutions.shape == (6, 81)
    givens = S.n_givens(puzzles)
    assert ((givens >= 24) & (givens <= 30)).all()
    assert sum(s.puzzles for s in stats.per_target.values()) == 6
    for p, s in zip(puzzles, solutions):
        n, ref = plain_count(p, limit=2)
        assert n == 1
        assert ref == s.tolist()
        assert plain_is_valid_solution(s, p)


def test_generator_exact_low_target_and_seeding():
    rng = np.random.default_rng(11)
    st = sudoku_generator.TargetStats()
    p, s = S.generate_puzzle(rng, 22, stats=st)  # needs the climb most of the time
    assert int((p != 0).sum()) == 22
    assert S.count_solutions(p)[0] == 1 and (S.count_solutions(p)[1] == s).all()
    assert st.puzzles == 1 and st.grids >= 1
    a = S.generate_puzzles(5, (23, 36), seed=7, chunk_size=2)
    b = S.generate_puzzles(5, (23, 36), seed=7, chunk_size=2)
    c = S.generate_puzzles(5, (23, 36), seed=8, chunk_size=2)
    d = S.generate_puzzles(5, (23, 36), seed=7, stream=1, chunk_size=2)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    assert not (a[1] == c[1]).all() and not (a[1] == d[1]).all()


def test_generator_parallel_output_equals_serial():
    serial = S.generate_puzzles(4, 30, seed=1, chunk_size=2, workers=1)
    parallel = S.generate_puzzles(4, 30, seed=1, chunk_size=2, workers=2)
    assert (serial[0] == parallel[0]).all() and (serial[1] == parallel[1]).all()


def test_generator_gives_up_with_a_clear_error():
    with pytest.raises(DataError, match="could not generate a Sudoku with 17 givens"):
        S.generate_puzzle(np.random.default_rng(0), 17, max_grids=1, climb_steps=2)
    with pytest.raises(ValueError, match="must be an integer"):
        S.generate_puzzle(np.random.default_rng(0), (24, 30))
    for bad in (16, (30, 25), "24", (20, 30, 40)):
        with pytest.raises(ValueError):
            S.givens_range(bad)
    # a puzzle needs a blank: 81 givens trained on a mean over no blanks (NaN loss, "try a lower lr"; probe AC)
    for full in (81, (30, 81)):
        with pytest.raises(ValueError, match=r"givens \(\w+ end\) = 81: must be an integer in \[\d+, 80\]"):
            S.givens_range(full)
    with pytest.raises(ValueError, match=r"givens = 81: must be an integer in \[17, 80\]"):
        S.generate_puzzle(np.random.default_rng(0), 81)


# ------------------------------------------------------------------------------------------------
# augmentation
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kinds", [
    {}, {"digits": False, "bands": False, "rows": False},  # transpose (or identity) only
    {"transpose": False, "bands": False, "rows": False},  # digits only
    {"digits": False, "transpose": False, "rows": False},  # bands/stacks only
    {"digits": False, "transpose": False, "bands": False},  # rows/columns within bands only
])
def test_augmentation_preserves_validity_and_correspondence(small_set, kinds):
    p, s = small_set
    ap, as_ = S.augment(p, s, seed=4, **kinds)
    assert S.is_solved_grid(as_).all()
    assert S.agrees_with_givens(as_, ap).all()
    assert (S.n_givens(ap) == S.n_givens(p)).all()
    counts, sols = S.count_solutions(ap)
    assert (counts == 1).all() and (sols == as_).all()
    assert plain_count(ap[0])[1] == as_[0].tolist()  # independent check on one
    if kinds:
        assert not (ap == p).all()  # each kind alone still changes something over 8 draws
    again = S.augment(p, s, seed=4, **kinds)
    assert (again[0] == ap).all() and (again[1] == as_).all()


def test_augmentation_torch_and_exact_transforms(small_set):
    p, s = small_set
    tp, ts = S.augment(torch.as_tensor(p, dtype=torch.long), torch.as_tensor(s, dtype=torch.long),
                       seed=9)
    assert isinstance(tp, torch.Tensor) and tp.dtype == torch.long and tp.shape == (8, 81)
    np_p, np_s = S.augment(p, s, seed=9)
    assert (tp.numpy() == np_p).all() and (ts.numpy() == np_s).all()
    t = S.random_transforms(8, 0, digits=False, bands=False, rows=False)
    out = S.apply_transforms(s, t).reshape(8, 9, 9)
    grids = s.reshape(8, 9, 9)
    for k in range(8):  # transpose-only: each output is the grid or its transpose
        assert (out[k] == grids[k]).all() or (out[k] == grids[k].T).all()


# ------------------------------------------------------------------------------------------------
# scoring and histogram
# ------------------------------------------------------------------------------------------------

def test_scoring_hand_made_cases():
    sol = S.grid_from_string(S17)
    puz = S.grid_from_string(P17)
    blanks = np.flatnonzero(puz == 0)  # 64 blanks
    wrong_blank = sol.copy()
    wrong_blank[blanks[0]] = sol[blanks[0]] % 9 + 1
    pred = np.stack([sol, wrong_blank, puz])  # solved / one wrong blank / nothing filled
    puzzles, solutions = np.stack([puz] * 3), np.stack([sol] * 3)
    assert S.board_accuracy(pred, puzzles, solutions) == pytest.approx(1 / 3)
    assert S.cell_accuracy(pred, puzzles, solutions) == pytest.approx((64 + 63 + 0) / 192)
    assert S.score_sudoku(torch.as_tensor(pred), puzzles, solutions) == pytest.approx(
        {"n": 3, "board_accuracy": 1 / 3, "valid_fraction": 1 / 3, "cell_accuracy": 127 / 192})
    # puzzles given complete: no cell to fill, so no cell accuracy (it was NaN, which `eval` took for a model
    # giving inf/NaN and exited 1 with every board solved)
    assert S.score_sudoku(sol[None], sol[None], sol[None]) == {"n": 1, "board_accuracy": 1.0, "valid_fraction": 1.0}
    # without solutions: validity against the givens; a different valid grid counts when it
    # keeps the givens (two-solution puzzle), and a grid that changes a given does not
    two = find_deadly_rectangle_puzzle()
    n, a = plain_count(two, limit=2)
    assert n == 2
    other = np.array(a, dtype=np.int8)
    rect = np.flatnonzero(two == 0)
    other[rect] = other[rect[[1, 0, 3, 2]]]  # swap the rectangle: the second solution
    assert S.is_solved_grid(other)[0] and not (other == np.array(a)).all()
    relabelled = np.where(other == 1, 2, np.where(other == 2, 1, other)).astype(np.int8)
    assert S.is_solved_grid(relabelled)[0]  # a valid grid, but it changes givens
    preds = np.stack([np.array(a, dtype=np.int8), other, relabelled])
    assert S.solved(preds, np.stack([two] * 3)).tolist() == [True, True, False]
    assert S.board_accuracy(preds, np.stack([two] * 3)) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="needs solutions"):
        S.cell_accuracy(preds, np.stack([two] * 3), None)


def test_givens_histogram_and_rendering():
    puz = S.grid_from_string(P17)
    sol = S.grid_from_string(S17)
    more = sol.copy()
    more[:10] = 0  # 71 givens
    hist = S.givens_histogram(np.stack([puz, puz, more]))
    assert hist == {17: 2, 71: 1}
    assert S.format_givens_histogram(hist) == "givens 17-71 (n=3, mean 35.0): 17:2 71:1"
    md = S.format_givens_histogram(hist, "markdown").splitlines()
    assert md[0] == "| givens | puzzles |" and md[2] == "| 17 | 2 |" and md[-1] == "| total | 3 |"
    assert S.format_givens_histogram({}) == "givens: empty data set (n=0)"


# ------------------------------------------------------------------------------------------------
# dataset, splits and cache
# ------------------------------------------------------------------------------------------------

def test_dataset_items_splits_and_checks(small_set):
    p, s = small_set
    ds = S.SudokuDataset(p, s, name="t")
    assert ds.puzzles.dtype == torch.long and ds.puzzles.shape == (8, 81)
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert batch["puzzle"].shape == batch["solution"].shape == (4, 81)
    parts = ds.split({"train": 0.5, "validation": 0.25, "test": 0.25}, seed=1)
    assert [len(v) for v in parts.values()] == [4, 2, 2]
    keys = [set(map(tuple, v.solutions.tolist())) for v in parts.values()]
    assert set.union(*keys) == set(map(tuple, s.tolist())) and sum(map(len, keys)) == 8
    again = ds.split({"train": 0.5, "validation": 0.25, "test": 0.25}, seed=1)
    assert torch.equal(again["test"].puzzles, parts["test"].puzzles)
    ds.check(unique=True)
    bad = S.SudokuDataset(p, np.roll(s, 1, axis=0), name="bad")
    with pytest.raises(DataError, match="bad: solution 0 contradicts"):
        bad.check()
    filled = S.SudokuDataset(p).solve_missing()
    assert torch.equal(filled.solutions, ds.solutions)
    assert ds.score(ds.solutions)["board_accuracy"] == 1.0


def test_generated_splits_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    cfg = S.SudokuGenConfig(n_train=6, n_validation=2, n_test=3, givens=(26, 30), seed=4)
    first = S.load_generated_sudoku(cfg)
    path = S.sudoku_cache_path(cfg)
    assert path.exists() and path.parent == tmp_path / "sudoku"
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["config"]["givens"] == [26, 30]
    assert sum(meta["givens_histogram"]["train"].values()) == 6
    for split, ds in first.items():
        assert len(ds) == cfg.sizes()[split]
        ds.check(unique=True)
        assert ds.givens_histogram() == {int(k): v for k, v in
                                         meta["givens_histogram"][split].items()}

    def boom(*a, **k):
        raise AssertionError("regenerated although cached")

    monkeypatch.setattr(S, "generate_streams", boom)
    second = S.load_generated_sudoku(cfg)
    for split in S.SPLITS:
        assert torch.equal(first[split].puzzles, second[split].puzzles)
        assert torch.equal(first[split].solutions, second[split].solutions)
    monkeypatch.undo()
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    path.write_bytes(b"not a zip")  # a corrupt cache is regenerated
    with pytest.warns(UserWarning, match="cannot be read.*generating it again"):
        third = S.load_generated_sudoku(cfg)
    assert torch.equal(third["test"].puzzles, first["test"].puzzles)
    # the test split does not depend on n_train; other parameters change the key
    bigger = S.load_generated_sudoku(cfg.model_copy(update={"n_train": 7}), cache=False)
    assert torch.equal(bigger["test"].puzzles, first["test"].puzzles)
    assert S.SudokuGenConfig(seed=1).cache_key() != S.SudokuGenConfig(seed=2).cache_key()
    assert S.SudokuGenConfig(givens=[24, 30]).givens == (24, 30)



def _tamper(path, split, **arrays):
    """Rewrite the cached npz at ``path`` with ``split``'s arrays replaced (meta kept: only a check can tell)."""
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    data.update({f"{split}_{k}": v for k, v in arrays.items()})
    with open(path, "wb") as f:
        np.savez_compressed(f, **data)


@pytest.mark.parametrize("tamper, problem", [
    (lambda p, s: {"solutions": np.ones_like(s)}, "test solution 0 that is not a valid Sudoku"),  # silently scored
    (lambda p, s: {"solutions": np.where(s == 5, 6, s)}, "not a valid Sudoku"),
    (lambda p, s: {"solutions": s + 20}, "test values outside 0..9"),  # was an internal error, no file named
    (lambda p, s: {"puzzles": s.copy()}, "test puzzle 0 with 81 givens, outside 26..30"),
    (lambda p, s: {"puzzles": p[:2]}, "test arrays of shapes"),
    (lambda p, s: {"puzzles": p.astype(np.float32)}, "expected integers"),
])
def test_tampered_cache_is_regenerated_with_a_warning(tmp_path, monkeypatch, capsys, tamper, problem):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    cfg = S.SudokuGenConfig(n_train=4, n_validation=2, n_test=3, givens=(26, 30), seed=5)
    first = S.load_generated_sudoku(cfg)
    path = S.sudoku_cache_path(cfg)
    assert f"energyformer: generating the Sudoku set into {path}" in capsys.readouterr().err
    with np.load(path) as z:
        p, s = z["test_puzzles"], z["test_solutions"]
    _tamper(path, "test", **tamper(p, s))
    with pytest.warns(UserWarning, match=f"Sudoku cache {re.escape(str(path))} .*{problem}.*generating it again"):
        again = S.load_generated_sudoku(cfg)
    for split in S.SPLITS:
        assert torch.equal(again[split].solutions, first[split].solutions)
        again[split].check()
