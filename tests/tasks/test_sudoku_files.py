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
