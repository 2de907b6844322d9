"""How the train, eval, generate and demo commands end: eval with a non-finite metric is a failed evaluation (exit 1,
said on stderr after the figures), generate refuses a run whose task does not generate in one line naming the tasks
that do, and a sample drawn from an older checkpoint (the newest is invalid) says so on stderr, stdout being the
sample alone; train ends with its summary line and leaves the logger as it was; the demo takes ENERGYFORMER_DEBUG."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

import energyformer.demo as demo
from energyformer.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from cli_tiny import TINY, train_tiny  # noqa: E402
from cli_tiny import sets as _sets  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("runs"))


def test_a_non_finite_metric_fails_the_evaluation(trained, tmp_path, capsys, monkeypatch):
    from energyformer.tasks.lm import LMTask

    real = LMTask.eval_from_args

    def nan_loss(self, model, args, options):
        where, res = real(self, model, args, options)
        return where, {**res, "loss": float("nan")}

    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 4)
    capsys.readouterr()
    monkeypatch.setattr(LMTask, "eval_from_args", nan_loss)
    assert main(["eval", str(trained), "--text-file", str(text)]) == 1
    out = capsys.readouterr()
    assert "loss nan nats/token" in out.out and "(checkpoint step 2)" in out.out, out.out
    assert out.err.startswith("energyformer: error: non-finite loss") and out.err.count("\n") == 1, out.err


def test_generate_of_a_run_whose_task_does_not_generate_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "gp.yaml"
    cfg.write_text(f"name: g\nout_dir: {tmp_path}\ntask: {{kind: gp, n_train: 32, n_test: 8, batch_size: 32}}\n"
                   "model: {dim: 16}\ntrain: {steps: 1, progress: false, tensorboard: false}\n")
    assert main(["train", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("energyformer: error: task 'gp' does not generate (runs of tasks that do: ") and "lm" in err
    assert err.count("\n") == 1, err


def test_a_sample_from_an_older_checkpoint_says_so_on_stderr(trained, capsys):
    state = trained / "ckpt-00000002" / "state.pt"
    good = state.read_bytes()
    state.write_bytes(good[:-10])  # the newest checkpoint damaged: step 1 is read
    capsys.readouterr()
    try:
        assert main(["generate", str(trained), "--prompt", "ROMEO:", "--max-new-tokens", "3"]) == 0
        out = capsys.readouterr()
    finally:
        state.write_bytes(good)
    assert out.out.startswith("ROMEO:") and "checkpoint" not in out.out, out.out
    said = f"{trained}: sampling from checkpoint step 1; newer checkpoint(s) ckpt-00000002 are invalid"
    assert said in out.err, out.err
    assert main(["generate", str(trained), "--prompt", "ROMEO:", "--max-new-tokens", "3"]) == 0
    assert "sampling from checkpoint" not in capsys.readouterr().err


# What `energyformer train` ends with: one summary line with the run's final evaluation (the figures of the last eval
# record in metrics.jsonl), its time and where the checkpoints are; and the trainer's logger as it was before
# (train.progress=false prints the step lines only during the run).


def test_train_ends_with_the_final_evaluation_and_leaves_the_logger_as_it_was(tmp_path, capsys):
    log = logging.getLogger("energyformer.train")
    before = (log.level, list(log.handlers))
    assert main(["train", "lm/llama", *_sets(TINY + ["train.steps=2", "name=s", f"out_dir={tmp_path}"])]) == 0
    assert (log.level, list(log.handlers)) == before
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    run = tmp_path / "s"
    evals = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "eval/loss" in r]
    assert f"loss {evals[-1]['eval/loss']:.4f} nats/token" in last, last
    assert last.startswith("s: ") and "perplexity" in last and last.endswith(f" s; checkpoints in {run}"), last


def test_train_out_is_the_output_root(tmp_path, capsys):
    """``train --out DIR`` overrides out_dir: the run is DIR/NAME, not under the config's out_dir."""
    other = tmp_path / "cfg_out"
    assert main(["train", "lm/llama", "--out", str(tmp_path / "root"),
                 *_sets(TINY + ["train.steps=1", "name=o", f"out_dir={other}"])]) == 0
    assert list((tmp_path / "root" / "o").glob("ckpt-*")) and not other.exists()
    assert capsys.readouterr().out.rstrip().endswith(f"checkpoints in {tmp_path / 'root' / 'o'}")


# ``energyformer demo`` takes ENERGYFORMER_DEBUG=1 as --debug (the cli docstring: "also ENERGYFORMER_DEBUG=1"): the
# demo answers Ctrl-C itself, so it must be told, or the variable would give no traceback for the demo alone.


@pytest.mark.parametrize("value, flag, debug", [(None, False, False), ("1", False, True), ("0", False, False),
                                                (None, True, True)])
def test_the_demo_is_told_debug_by_the_flag_or_the_environment(value, flag, debug, monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(demo, "main", lambda out, steps, overrides, only, debug: seen.append(debug) or 0)
    if value is None:
        monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    else:
        monkeypatch.setenv("ENERGYFORMER_DEBUG", value)
    assert main([*(["--debug"] if flag else []), "demo", "--only", "eqt", "--out", str(tmp_path)]) == 0
    assert seen == [debug]
