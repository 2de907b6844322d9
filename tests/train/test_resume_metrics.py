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
