"""Sudoku runs on puzzle files (``task.source: files``): the files are saved absolute (a relative name read
another directory's file on eval/--resume, silently); resuming on other boards is a DataError naming the file
(another count drew empty batches — a NaN loss reported as divergence — and the same count trained on other
boards silently); a repeated ``eval --puzzles`` is refused (it scored only the last file)."""

from __future__ import annotations

import argparse
import os

import pytest

from energyformer.data.sudoku import generate_puzzles
from energyformer.data.sudoku_dataset import SudokuDataset
from energyformer.errors import DataError
from energyformer.tasks.sudoku import SudokuBatcher, SudokuTask, SudokuTaskConfig


@pytest.fixture(scope="module")
def boards():
    p, s, _ = generate_puzzles(24, (40, 50), seed=5, chunk_size=8)
    return SudokuDataset(p, s)


def test_puzzle_files_are_saved_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = SudokuTaskConfig(source="files", train_file="tr.csv", validation_file="~/va.csv", test_file=None)
    assert cfg.train_file == str(tmp_path / "tr.csv")
    assert cfg.validation_file == os.path.expanduser("~/va.csv") and cfg.test_file is None


def test_resuming_on_other_boards_is_a_data_error_naming_the_file(boards):
    a = SudokuBatcher(boards.subset(range(16)), 4, seed=0, source="task.train_file /x/tr.csv")
    a.next_batch()
    state = a.state_dict()
    fewer = SudokuBatcher(boards.subset(range(12)), 4, seed=0, source="task.train_file /x/tr.csv")
    with pytest.raises(DataError, match=r"/x/tr.csv: the training boards changed since the checkpoint "
                                        r".16 boards then, 12 now"):
        fewer.load_state_dict(state)
    other = SudokuBatcher(boards.subset(range(8, 24)), 4, seed=0, source="task.train_file /x/tr.csv")
    with pytest.raises(DataError, match="16 boards then, 16 now, other puzzles or solutions"):
        other.load_state_dict(state)
    same = SudokuBatcher(boards.subset(range(16)), 4, seed=0)
    same.load_state_dict(state)
    assert (same.next_batch()[0] == a.next_batch()[0]).all()  # exact resume on the same boards


def test_a_state_saved_before_the_checks_is_checked_on_its_order(boards):
    a = SudokuBatcher(boards.subset(range(16)), 4, seed=0)
    a.next_batch()
    old = {k: a.state_dict()[k] for k in ("gen", "perm", "i", "drawn")}
    SudokuBatcher(boards.subset(range(16)), 4, seed=0).load_state_dict(old)
    with pytest.raises(DataError, match="16 boards then, 12 now"):
        SudokuBatcher(boards.subset(range(12)), 4, seed=0).load_state_dict(old)


def test_a_repeated_puzzles_option_is_refused(capsys):
    parser = argparse.ArgumentParser(prog="energyformer eval")
    SudokuTask.add_eval_args(parser)
    assert parser.parse_args(["--puzzles", "a.csv"]).puzzles == "a.csv"
    with pytest.raises(SystemExit):
        parser.parse_args(["--puzzles", "a.csv", "--puzzles", "b.csv"])
    err = capsys.readouterr().err
    assert "--puzzles given twice (a.csv, b.csv)" in err and err.count("\n") == 2, err  # usage + one line



def test_resuming_on_other_held_out_boards_is_a_data_error(boards):
    """The state kept no trace of the validation/test boards: a replaced task.validation_file (or the training
    file's split-off part) resumed silently, the run's later evaluations scoring other boards than its first."""
    val, train = boards.subset(range(16, 20)), boards.subset(range(16))
    a = SudokuBatcher(train, 4, seed=0, held_out=[val], held_out_source="task.validation_file /x/va.csv")
    a.next_batch()
    SudokuBatcher(train, 4, seed=0, held_out=[val]).load_state_dict(a.state_dict())
    other = SudokuBatcher(train, 4, seed=0, held_out=[boards.subset(range(18, 22))],
                          held_out_source="task.validation_file /x/va.csv")
    with pytest.raises(DataError, match=r"^task.validation_file /x/va.csv: the held-out boards changed"):
        other.load_state_dict(a.state_dict())
    no_solutions = SudokuDataset(val.puzzles)  # the same puzzles without solutions are other held-out data
    with pytest.raises(DataError, match="held-out boards changed"):
        SudokuBatcher(train, 4, seed=0, held_out=[no_solutions]).load_state_dict(a.state_dict())
    old = {k: v for k, v in a.state_dict().items() if k != "held_out_sha256"}  # saved before: not checked
    other.load_state_dict(old)


def _write(path, puzzles, solutions):
    rows = ["".join(map(str, p.tolist())) + "," + "".join(map(str, s.tolist())) for p, s in zip(puzzles, solutions)]
    path.write_text("quizzes,solutions\n" + "\n".join(rows) + "\n")
    return str(path)


def test_fully_given_boards_are_left_out_and_a_file_of_them_refused(boards, tmp_path):
    """A board with no blank has nothing to learn or solve: a training batch of them averaged the loss over no
    cell (NaN at step 1) and a held-out one counted as solved; they are left out with a warning."""
    from energyformer.tasks.sudoku import load_splits

    full = _write(tmp_path / "full.csv", boards.solutions[:12], boards.solutions[:12])
    with pytest.raises(DataError, match=r"task.train_file = '.*full.csv': every puzzle is fully given"):
        load_splits(SudokuTaskConfig(source="files", train_file=full))
    tr = _write(tmp_path / "tr.csv", boards.puzzles[:16], boards.solutions[:16])
    va = _write(tmp_path / "va.csv", boards.puzzles[16:], boards.solutions[16:])
    with pytest.raises(DataError, match=r"task.test_file = '.*full.csv': every puzzle is fully given"):
        load_splits(SudokuTaskConfig(source="files", train_file=tr, validation_file=va, test_file=full))
    mixed = _write(tmp_path / "mixed.csv", list(boards.puzzles[:14]) + [boards.solutions[14], boards.solutions[15]],
                   boards.solutions[:16])
    with pytest.warns(UserWarning, match=r"mixed.csv': 2 of 16 puzzles have no blank cell \(board\(s\) 15, 16\)"):
        splits = load_splits(SudokuTaskConfig(source="files", train_file=mixed))
    assert len(splits["train"]) + len(splits["validation"]) == 14
    assert all(bool((d.puzzles == 0).any(1).all()) for d in splits.values())


def test_held_out_puzzles_that_are_training_puzzles(boards, tmp_path):
    """validation_file = train_file was accepted silently (validation scored the training boards); now all
    held-out boards in the training file is a DataError, some of them a warning naming the boards."""
    from energyformer.tasks.sudoku import load_splits

    tr = _write(tmp_path / "tr.csv", boards.puzzles[:16], boards.solutions[:16])
    for key in ("validation_file", "test_file"):
        with pytest.raises(ValueError, match=rf"task.{key} = '.*tr.csv' is task.train_file: its scores would be"):
            SudokuTaskConfig(source="files", train_file=tr, **{key: tr})
    copy = _write(tmp_path / "copy.csv", boards.puzzles[:16].flip(0), boards.solutions[:16].flip(0))
    with pytest.raises(DataError, match=r"task.validation_file = '.*copy.csv': all 16 validation puzzles are also "
                                        r"training puzzles \(task.train_file = '.*tr.csv'\)"):
        load_splits(SudokuTaskConfig(source="files", train_file=tr, validation_file=copy))
    va = _write(tmp_path / "va.csv", boards.puzzles[14:20], boards.solutions[14:20])
    with pytest.warns(UserWarning, match=r"va.csv': 2 of 6 validation puzzles are also training puzzles "
                                         r"\(board\(s\) 1, 2\)"):
        splits = load_splits(SudokuTaskConfig(source="files", train_file=tr, validation_file=va))
    assert len(splits["validation"]) == 6
    twice = _write(tmp_path / "twice.csv", list(boards.puzzles[:10]) * 2, list(boards.solutions[:10]) * 2)
    with pytest.raises(DataError, match=r"the validation part split off task.train_file = '.*twice.csv': all 2 "
                                        r"validation puzzles are also training .* the file repeats puzzles"):
        load_splits(SudokuTaskConfig(source="files", train_file=twice))
