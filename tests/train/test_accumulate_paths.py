"""StepPlan's two paths that test_accumulate.py does not reach (mutation probe AI)."""

from __future__ import annotations

import torch

from energyformer.train.accumulate import StepPlan


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
