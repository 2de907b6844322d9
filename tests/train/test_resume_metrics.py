"""What metrics.jsonl tells after a stop and --resume equals what the uninterrupted run tells.

A checkpoint is written before its step's evaluation: a stop between the two lost that evaluation for good (the
final one too), so a study read an earlier one as the last. The open logging window (steps since the last train
event) was not in the checkpoint: the first train event after a resume averaged only the steps since it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from energyformer.cli import main

TINY = ["model.dim=16", "model.n_layers=1", "model.heads=2", "model.max_seq_len=16", "task.seq_len=16",
        "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=2", "train.progress=false",
        "train.tensorboard=false", "train.keep_checkpoints=0", "train.steps=10",
        "train.schedule.kind=constant"]


def _train(root, name, extra=(), resume=False):
    sets = TINY + [f"out_dir={root}", f"name={name}", *extra]
    argv = ["train", "lm/llama", *(["--resume"] if resume else []), *[a for kv in sets for a in ("--set", kv)]]
    assert main(argv) == 0


def _events(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _stop_after_checkpoint(run, step, keep_eval=False):
    """The run dir as a stop right after ``step``'s checkpoint leaves it (before its evaluation)."""
    for p in run.glob("ckpt-*"):
        if int(p.name.split("-")[1]) > step:
            shutil.rmtree(p)
    (run / "latest").unlink(missing_ok=True)
    kept = [e for e in _events(run) if e["step"] < step or (e["step"] == step and (e["event"] != "eval" or keep_eval))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    _train(root, "a", ["train.eval_every=5", "train.save_every=3", "train.log_every=4"])
    return root / "a"


@pytest.mark.parametrize("step", [6, 10])  # not an eval step's checkpoint; the final one (an eval step)
def test_the_evaluation_a_stop_lost_is_redone_and_the_events_equal_the_uninterrupted_runs(reference, tmp_path, step):
    run = tmp_path / "a"
    shutil.copytree(reference, run)
    _stop_after_checkpoint(run, step)
    _train(tmp_path, "a", ["train.eval_every=5", "train.save_every=3", "train.log_every=4"], resume=True)
    want = [(e["event"], e["step"], e.get("loss")) for e in _events(reference)]
    got = [(e["event"], e["step"], e.get("loss")) for e in _events(run)]
    assert got == want


def test_an_evaluation_already_logged_is_not_redone(reference, tmp_path):
    run = tmp_path / "a"
    shutil.copytree(reference, run)
    _stop_after_checkpoint(run, 10, keep_eval=True)
    _train(tmp_path, "a", ["train.eval_every=5", "train.save_every=3", "train.log_every=4"], resume=True)
    assert [e["step"] for e in _events(run) if e["event"] == "eval"] == [5, 10]


def test_a_mid_run_evaluation_lost_with_its_checkpoint_is_redone(tmp_path):
    ov = ["train.eval_every=5", "train.save_every=5", "train.log_every=1"]
    _train(tmp_path / "ref", "b", ov)
    run = tmp_path / "b"
    shutil.copytree(tmp_path / "ref" / "b", run)
    _stop_after_checkpoint(run, 5)  # killed during step 5's evaluation
    _train(tmp_path, "b", ov, resume=True)
    want = [(e["event"], e["step"], e.get("loss")) for e in _events(tmp_path / "ref" / "b")]
    assert [(e["event"], e["step"], e.get("loss")) for e in _events(run)] == want


def test_resuming_below_the_checkpoint_step_is_refused_and_a_longer_run_names_the_schedule(reference, tmp_path,
                                                                                            capsys):
    """train.steps below the checkpoint's step "finished" there without a word; a changed train.steps only said
    "steps: 10 -> 20", though the cosine schedule then spans 20 steps and the rate jumps."""
    run = tmp_path / "a"
    shutil.copytree(reference, run)
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    sets = TINY + [f"out_dir={tmp_path}", "name=a", "train.steps=6", "train.eval_every=5", "train.save_every=3",
                   "train.log_every=4"]
    assert main(["train", "lm/llama", "--resume", *[a for kv in sets for a in ("--set", kv)]]) == 2
    err = capsys.readouterr().err
    assert "train.steps = 6: the checkpoint" in err and "is at step 10, past it" in err and err.count("\n") == 1
    assert sorted(p.name for p in run.iterdir()) == before
    longer = [s for s in sets if s != "train.steps=6"] + ["train.steps=12"]  # the schedule stays constant
    assert main(["train", "lm/llama", "--resume", *[a for kv in longer for a in ("--set", kv)]]) == 0
    err = capsys.readouterr().err
    assert "steps: 10 -> 12" in err and "schedule now spans" not in err  # a constant rate does not jump
    shutil.rmtree(run)
    shutil.copytree(reference, run)
    cosine = [s for s in longer if s != "train.schedule.kind=constant"]  # warmup_cosine (a changed kind too)
    assert main(["train", "lm/llama", "--resume", *[a for kv in cosine for a in ("--set", kv)]]) == 0
    err = capsys.readouterr().err
    assert "the learning-rate schedule now spans the new train.steps" in err, err
