"""What the CLI prints for a user to read or paste: ``energyformer config`` and the Ctrl-C resume command.

``config NAME --set ...`` prints the config as ``train`` records it in RUN/config.yaml. It used to print it before the
task filled the model keys it sets: ``model.vocab_size: 4096`` for a gpt2-tokenized run (50257) or a parity run (2).
The "continue with:" command printed on Ctrl-C is shell-quoted: it used to be joined with spaces, so pasting it split
``--set 'train.lr_multipliers={norm: 2}'`` into two arguments ("unrecognised arguments: 2}").
"""

from __future__ import annotations

import shlex

import pytest

from energyformer import cli
from energyformer.cli import main

TINY_LM = ["model.dim=16", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=16",
           "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1"]
TINY_PARITY = ["model.dim=16", "model.n_layers=1", "model.heads=2", "task.batch_size=2"]
TRAIN = ["train.steps=1", "train.progress=false", "train.tensorboard=false", "train.eval_every=0",
         "train.save_every=0", "train.keep_checkpoints=1"]


def _sets(items: list[str]) -> list[str]:
    return [a for kv in items for a in ("--set", kv)]


@pytest.mark.parametrize("name, sets, key", [
    ("lm/llama", TINY_LM + ["task.tokenizer=gpt2"], "vocab_size: 50257"),
    ("eqt/baseline", TINY_PARITY, "vocab_size: 2"),
])
def test_config_prints_what_train_records(name, sets, key, tmp_path, capsys):
    """Old code: ``config`` printed ``vocab_size: 4096`` where the run's config.yaml holds the task's value."""
    sets = sets + TRAIN + [f"out_dir={tmp_path}", "name=run"]
    assert main(["config", name, *_sets(sets)]) == 0
    printed = capsys.readouterr().out
    assert main(["train", name, *_sets(sets)]) == 0
    recorded = (tmp_path / "run" / "config.yaml").read_text()
    assert key in recorded
    assert printed == recorded
    capsys.readouterr()
    assert main(["config", str(tmp_path / "run" / "config.yaml")]) == 0  # a run's own file: as it is
    assert capsys.readouterr().out == recorded


def test_config_unresolved_says_so(capsys):
    assert main(["config", "lm/llama", "--unresolved", "--set", "task.tokenizer=gpt2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# unresolved: ") and "vocab_size: 4096" in out


def test_ctrl_c_resume_command_pastes_as_the_same_arguments(tmp_path, capsys, monkeypatch):
    """Old code: ``" ".join`` of the arguments; shlex.split of the hint gave ``--set train.lr_multipliers={norm:``
    and ``2}`` (and an --out folder with a space became two arguments)."""
    def interrupted(a, extra):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_train", interrupted)
    out = tmp_path / "my runs"
    out.mkdir()
    sets = ["train.lr_multipliers={norm: 2}", "train.schedule[kind=constant].warmup=0.1", "name=a;b"]
    assert main(["train", "lm/llama", "--out", str(out), *_sets(sets)]) == 130
    err = capsys.readouterr().err
    hint = err.split("continue with: ", 1)[1].strip()
    assert shlex.split(hint) == ["energyformer", "train", "lm/llama", "--resume", "--out", str(out), *_sets(sets)]
