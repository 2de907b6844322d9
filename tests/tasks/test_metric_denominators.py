"""Metric denominators the task tests leave open: the Potts Bayes loss's standard error is std / sqrt(n) (a
standard error, not the spread of one site), and denoise's ``gain`` is the peak overlap above the start."""

import math

import pytest
import torch

from energyformer.experiment import build_task, load_run_config

POTTS = ["task.data.L=6", "task.data.C=3", "task.data.n_train=64", "task.data.n_test=128", "task.data.burn_in=20",
         "task.data.samples_per_chain=8", "task.n_validation=32", "task.batch_size=16"]


def test_the_bayes_loss_standard_error_divides_by_sqrt_n(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    task = build_task(load_run_config("bare_sa/potts_factored", POTTS))
    s, _, masked = task.eval_set("test")
    lp = task.data.model.conditional_log_probs(s)
    nll = -lp.gather(2, s[..., None])[..., 0][masked]
    ref = task.bayes_reference("test")
    assert nll.numel() == 128
    assert ref["bayes_loss_se"] == pytest.approx(float(nll.std()) / math.sqrt(128))


def test_denoise_gain_is_the_peak_overlap_above_the_start(monkeypatch):
    cfg = load_run_config("bare_sa/digits_denoise", ["task.eval_images=8", "task.eval_steps=4",
                                                      "task.report_steps=[0,4]", "task.n_train=64"])
    task = build_task(cfg)
    curve = [0.5, 0.9, 0.8, 0.7, 0.6]  # the overlap peaks at step 1, then falls
    monkeypatch.setattr(task, "curves", lambda model, split, steps: {"overlap": curve, "nearest": curve, "mse": curve})
    ev = task.evaluate(torch.nn.Linear(1, 1), "test")  # (the model only switches to eval mode here)
    assert ev["peak_step"] == 1.0 and ev["gain"] == pytest.approx(0.4) and ev["final_overlap"] == 0.6


def test_classification_eval_loss_is_the_mean_over_examples(monkeypatch):
    """ImageClassificationTask.evaluate: ``loss`` is predict's summed cross-entropy / the examples (nats per example,
    as the training loss), not the sum."""
    import energyformer.tasks.classification as tc

    task = build_task(load_run_config(None, ["task.kind=image_classification", "task.dataset=digits",
                                             "model.patch_size=4", "model.dim=32", "model.heads=2"]))
    preds, labels = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 2, 3])
    monkeypatch.setattr(tc, "predict", lambda model, batches, **options: (preds, labels, 8.0))
    ev = task.evaluate(torch.nn.Linear(1, 1), "validation")
    assert ev["loss"] == 2.0 and ev["accuracy"] == 0.75 and ev["examples"] == 4.0
