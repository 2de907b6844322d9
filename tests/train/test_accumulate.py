"""Micro-batch weights for losses that average over a varying number of items (train/accumulate.py)."""

from __future__ import annotations

import pytest
import torch
from train_toys import ToyData, ToyMLP

from energyformer.train import TrainConfig, Trainer
from energyformer.train.accumulate import StepPlan, count_items, micro_weights
from energyformer.train.rng import seed_everything


def test_equal_counts_keep_the_plain_mean_and_unequal_ones_weigh_by_items():
    assert micro_weights([5, 5, 5]) is None  # Σ loss_i / accum, bit for bit as before
    assert micro_weights([0, 0]) is None  # nothing to weigh
    assert micro_weights([1, 3]) == [0.25, 0.75]
    # DDP: N over the ranks; the factor world undoes DDP's mean of the ranks' gradients
    assert micro_weights([2, 2], world=2, all_reduce=lambda n: n + 12) == [2 * 2 / 16, 2 * 2 / 16]
    assert micro_weights([4, 4], world=2, all_reduce=lambda n: 2 * n) is None  # equal on every rank


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3", None])
def test_a_bad_count_is_a_clear_error(bad):
    with pytest.raises(TypeError, match=r"loss_items\(batch\) = .*an integer >= 0"):
        count_items(lambda b: bad, ())
    assert count_items(lambda b: torch.tensor(7), ()) == 7


class _Masked(ToyData):
    """ToyData whose batches count only some targets (those above 0.3: a varying number per batch)."""

    def next_batch(self):
        x, y = super().next_batch()
        return x, y, y > 0.3


def _masked_mse(model, batch):
    x, y, keep = batch
    return ((model(x) - y) ** 2)[keep].mean(), {}


def _fit(tmp_path, batch_size, accum, weigh):
    """Three SGD steps; the counts of each step's halves differ (checked)."""
    seed_everything(0)
    model, data = ToyMLP(dropout=0.0), _Masked(batch_size=batch_size)
    cfg = TrainConfig(steps=3, seed=0, log_every=1, eval_every=0, save_every=0, progress=False, tensorboard=False,
                      device="cpu", lr=1e-2, grad_accum=accum, optimizer={"kind": "sgd"}, grad_clip=0)
    t = Trainer(model, cfg, _masked_mse, data, out_dir=tmp_path / f"{batch_size}_{accum}_{weigh}",
                count_fn=(lambda b: int(b[2].sum())) if weigh else None)
    t.fit()
    return t


def test_accumulated_steps_equal_the_whole_batch_when_the_items_vary(tmp_path):
    """Once: grad_accum took the mean of the micro-batches' means, so a micro-batch with 4 counted targets
    weighed as much as one with 16 and grad_accum 2 at batch 8 was not the step of batch 16."""
    data = _Masked(batch_size=8)
    counts = [int(data.next_batch()[2].sum()) for _ in range(6)]
    assert counts[0::2] != counts[1::2], counts  # the halves of a step count different numbers of targets
    whole = _fit(tmp_path, 16, 1, True)
    halves = _fit(tmp_path, 8, 2, True)
    plain = _fit(tmp_path, 8, 2, False)
    assert halves.loss_history == pytest.approx(whole.loss_history, rel=1e-5)
    for a, b, c in zip(whole.model.parameters(), halves.model.parameters(), plain.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a, c, rtol=1e-3, atol=1e-4)
               for a, c in zip(whole.model.parameters(), plain.model.parameters()))  # the mean of means differs


class _HalfEmpty(ToyData):
    """ToyData whose batches of 16 count only their second half's targets."""

    def next_batch(self):
        x, y = super().next_batch()
        keep = torch.zeros_like(y, dtype=torch.bool)
        keep[len(keep) // 2:] = True
        return x, y, keep


def test_a_micro_batch_with_no_item_is_left_out_not_a_nan_step(tmp_path):
    """The step's first micro-batch counts no target: its mean loss is NaN and so is its gradient, which a weight
    of 0 did not cancel (NaN · 0 = NaN: the step diverged); it is left out, and grad_accum 2 at batch 8 takes the
    step of batch 16."""
    def fit(batch_size, accum):
        seed_everything(0)
        data = _HalfEmpty(batch_size=16)
        if batch_size == 8:  # the same 16 rows, drawn as two halves of 8
            rows = iter(())

            def halves():
                nonlocal rows
                try:
                    return next(rows)
                except StopIteration:
                    x, y, keep = _HalfEmpty.next_batch(data)
                    rows = iter([(x[:8], y[:8], keep[:8]), (x[8:], y[8:], keep[8:])])
                    return next(rows)
            data.next_batch = halves
        cfg = TrainConfig(steps=2, seed=0, log_every=1, eval_every=0, save_every=0, progress=False,
                          tensorboard=False, device="cpu", lr=1e-2, grad_accum=accum, optimizer={"kind": "sgd"},
                          grad_clip=0)
        t = Trainer(ToyMLP(dropout=0.0), cfg, _masked_mse, data, out_dir=tmp_path / f"{batch_size}_{accum}",
                    count_fn=lambda b: int(b[2].sum()))
        t.fit()
        return t

    whole, halves = fit(16, 1), fit(8, 2)
    assert halves.loss_history == pytest.approx(whole.loss_history, rel=1e-6)
    for a, b in zip(whole.model.parameters(), halves.model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_weighed_accumulation_resumes_exactly(tmp_path):
    """The weighed path draws a step's micro-batches before its first forward; a run that crashed in step 5 and
    resumed from its step-4 checkpoint still takes every later step exactly as an uninterrupted run."""
    def trainer(out, loss=_masked_mse):
        seed_everything(0)
        cfg = TrainConfig(steps=6, seed=0, log_every=1, eval_every=0, save_every=2, progress=False,
                          tensorboard=False, device="cpu", lr=1e-2, grad_accum=3)
        return Trainer(ToyMLP(dropout=0.1), cfg, loss, _Masked(batch_size=8), out_dir=out,
                       count_fn=lambda b: int(b[2].sum()))

    whole = trainer(tmp_path / "whole")
    whole.fit()
    calls = {"n": 0}

    def crashing(model, batch):
        calls["n"] += 1
        if calls["n"] == 14:  # the second micro-batch of step 5
            raise RuntimeError("boom")
        return _masked_mse(model, batch)

    with pytest.raises(RuntimeError, match="boom"):
        trainer(tmp_path / "part", crashing).fit()
    rest = trainer(tmp_path / "part")
    rest.fit(resume=True)
    assert rest.loss_history == whole.loss_history[4:]
    for a, b in zip(whole.model.parameters(), rest.model.parameters()):
        assert torch.equal(a, b)


def test_ddp_metric_shares_sum_to_accum_on_each_rank():
    """Under DDP the micro weights n_i·world/N sum to world·local/N on a rank, not 1; a rank's metrics are its own
    items' mean, so their shares are the weights over this rank's sum. Once (a mutant) the metric share was the
    loss share: counts [1, 3] of 16 items over 2 ranks logged the metrics × 0.5 ([0.25, 0.75], not [0.5, 1.5])."""
    from energyformer.train.accumulate import StepPlan

    it = iter([(torch.zeros(1),), (torch.zeros(3),)])
    plan = StepPlan(lambda: next(it), 2, count_fn=lambda b: int(b[0].numel()), world=2, all_reduce=lambda n: n + 12)
    shares = [plan.share(i) for i in range(2)]
    assert [s[0] for s in shares] == pytest.approx([1 * 2 / 16 * 2, 3 * 2 / 16 * 2])  # n_i·world/N · accum
    assert [s[1] for s in shares] == pytest.approx([0.5, 1.5])  # n_i / local · accum
    assert sum(s[1] for s in shares) == pytest.approx(2)


# StepPlan's two paths the tests above do not reach (mutation probe AI)
def test_plain_accumulation_divides_each_micro_batch_by_accum():
    # Pins the plain form Σ loss_i / accum (no count_fn): a backward of loss / 1 instead of loss / accum
    # (the step then being accum times too large) passed every other test.
    w = torch.ones(3, requires_grad=True)
    plan = StepPlan(lambda: (), accum=4)
    assert plan.weights is None
    plan.backward(0, (2.0 * w).sum())
    assert torch.equal(w.grad, torch.full((3,), 0.5))


def test_one_micro_batch_per_rank_is_still_weighed_under_ddp():
    # Pins ``accum > 1 or world > 1``: with grad_accum 1 under DDP the ranks' counts still differ, so the
    # rank's loss weighs n · world / N (2 · 2 / 8 here), not the plain 1.
    batches = iter([(torch.zeros(2),)])
    plan = StepPlan(lambda: next(batches), accum=1, count_fn=lambda b: 2, world=2, all_reduce=lambda n: n + 6)
    assert plan.weights == [0.5]
    w = torch.ones(1, requires_grad=True)
    plan.backward(0, w.sum())
    assert torch.equal(w.grad, torch.tensor([0.5]))
