"""``task.eval_max`` caps Sudoku's periodic evaluation only; ``energyformer eval`` scores the whole split
(probe Q, F3).

Before the fix ``SudokuTask.evaluate`` always applied the cap, so ``energyformer eval RUN --split test`` of a run
with ``task.eval_max: 3`` printed the metrics of the first 3 test boards as the test split's ("3 boards"); the
shipped ``hyperset/sudoku_hyperset`` (eval_max 500) scored half of its 1,000 test boards."""

import argparse

import pytest

from energyformer.cli import main
from energyformer.models.config import ModelConfig
from energyformer.tasks.sudoku import SudokuTask, SudokuTaskConfig

GEN = {"n_train": 16, "n_validation": 8, "n_test": 8, "givens": [45, 55]}


@pytest.fixture()
def data_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    return tmp_path


def test_periodic_evaluation_is_capped_and_eval_scores_the_whole_split(data_env):
    task = SudokuTask(SudokuTaskConfig(generate=GEN, batch_size=4, eval_max=3), seed=0)
    model = task.build_model(task.resolve_model_config(
        ModelConfig(dim=16, heads=2, n_layers=1, iterations=1, max_seq_len=81)))
    assert task.eval_fn("validation")(model)["n"] == 3          # the periodic evaluation keeps the cap
    assert task.evaluate(model, "test")["n"] == 3
    assert task.evaluate(model, "test", all_boards=True)["n"] == 8
    where, res = task.eval_from_args(model, argparse.Namespace(split="test", puzzles=None), {})
    assert res["n"] == 8 and res == task.evaluate(model, "test", all_boards=True)  # old code: n == 3


def test_cli_eval_split_scores_every_board(data_env, capsys):
    cfg = data_env / "s.yaml"
    cfg.write_text(f"""
name: s
out_dir: {data_env}
task: {{kind: sudoku, generate: {GEN}, batch_size: 4, eval_max: 3}}
model: {{dim: 16, heads: 2, n_layers: 1, iterations: 1, max_seq_len: 81}}
train: {{steps: 1, eval_every: 0, save_every: 0, progress: false, tensorboard: false}}
""")
    assert main(["train", str(cfg)]) == 0
    assert "3 boards" in capsys.readouterr().out                 # training's own evaluation: capped
    assert main(["eval", str(data_env / "s"), "--split", "test"]) == 0
    assert "8 boards" in capsys.readouterr().out                 # old code: "3 boards"
