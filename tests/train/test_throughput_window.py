"""A train event's ``tokens_per_s`` is the throughput of its training steps: checkpoint saves and evaluations
(their time is logged on its own as ``eval_s``) do not count in the window that follows them.

Old behaviour: the window's clock restarted when its event was logged and the trainer then saved and evaluated,
so that time landed in the next window (probe R: 843-1644 tok/s after an evaluation vs 3873-10251 otherwise).
"""

from __future__ import annotations

import types

import pytest
from train_toys import build, read_metrics

import energyformer.train.metrics as metrics_mod
from energyformer.train import Trainer
from energyformer.train.contract import EvaluationFailed

STEP_S, EVAL_S, SAVE_S = 1.0, 100.0, 50.0
BATCH = 16  # ToyData counts one token per sample


class FakeClock:
    """The window's clock: moves only when a training step, an evaluation or a save says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(metrics_mod, "time", types.SimpleNamespace(perf_counter=c))
    inner_save = Trainer._save

    def slow_save(self, *args, **kwargs):
        c.now += SAVE_S
        return inner_save(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_save", slow_save)
    return c


def _timed(trainer, clock, *, fail_eval_at: int | None = None) -> None:
    """Each training step takes STEP_S on the fake clock, each evaluation EVAL_S (the n-th may raise)."""
    loss_fn, eval_fn = trainer.loss_fn, trainer.eval_fn
    calls = {"eval": 0}

    def timed_loss(model, batch):
        clock.now += STEP_S
        return loss_fn(model, batch)

    def timed_eval(model):
        clock.now += EVAL_S
        calls["eval"] += 1
        if calls["eval"] == fail_eval_at:
            raise RuntimeError("eval broke")
        return eval_fn(model)

    trainer.loss_fn, trainer.eval_fn = timed_loss, timed_eval


def test_windows_after_saves_and_evaluations_count_training_steps_only(tmp_path, clock):
    """Old code: the windows after the save/eval at steps 2 and 4 logged 32 / 152 s, not 32 / 2 s."""
    t = build(tmp_path, steps=6, log_every=2, save_every=2, with_eval=True, eval_every=2, batch_size=BATCH)
    _timed(t, clock)
    t.fit()
    events = read_metrics(tmp_path)
    assert [e["step"] for e in events] == [2, 4, 6]
    assert [e["tokens_per_s"] for e in events] == [pytest.approx(BATCH / STEP_S)] * 3
    assert len(read_metrics(tmp_path, "eval")) == 3


def test_evaluation_redone_at_resume_is_not_training_time(tmp_path, clock):
    """A run stopped between step 4's checkpoint and its evaluation redoes that evaluation when resumed;
    old code counted it in the first window after the resume (32 tokens / 102 s)."""
    t1 = build(tmp_path, steps=6, log_every=2, save_every=2, with_eval=True, eval_every=2, batch_size=BATCH)
    _timed(t1, clock, fail_eval_at=2)
    with pytest.raises(EvaluationFailed):
        t1.fit()
    t2 = build(tmp_path, steps=6, log_every=2, save_every=2, with_eval=True, eval_every=2, batch_size=BATCH)
    _timed(t2, clock)
    t2.fit(resume=True)
    assert [e["step"] for e in read_metrics(tmp_path, "eval")] == [2, 4, 6]  # step 4's, redone at the resume
    events = read_metrics(tmp_path)
    assert [e["step"] for e in events] == [2, 4, 6]
    assert events[-1]["tokens_per_s"] == pytest.approx(BATCH / STEP_S)
