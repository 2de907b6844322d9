"""StepWindow (train/metrics.py): a ``train`` event's loss and task metrics are the *mean* over the window's
optimiser steps ("their mean loss and metrics"), not the last step's value or the sum."""

from energyformer.train.metrics import StepWindow


def test_a_train_event_averages_loss_and_metrics_over_the_window():
    w = StepWindow()
    w.add(1.0, {"acc": 0.2}, tokens=10, grad_norm=None)
    w.add(3.0, {"acc": 0.6}, tokens=10, grad_norm=0.5)
    ev = w.event(step=2, lr=0.1, tokens_total=20, elapsed_s=1.0)
    assert ev["loss"] == 2.0 and abs(ev["train/acc"] - 0.4) < 1e-12 and ev["grad_norm"] == 0.5
