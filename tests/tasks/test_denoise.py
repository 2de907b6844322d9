"""The denoise task on the always-available digits: embedding sizes, training, overlap curves."""

import math
import re

import pytest
import torch

from energyformer.experiment import build_model, build_task, load_run_config, resolve, run_experiment
from energyformer.utils.validate import ConfigError

SMALL = ["task.eval_images=32", "task.eval_steps=4", "task.report_steps=[0,1,4]", "task.nearest_train=200",
         "task.n_train=256", "train.steps=5", "train.eval_every=0", "train.log_every=0",
         "train.progress=false", "train.tensorboard=false", "train.save_every=0"]


def test_denoise_trains_and_reports_curves(tmp_path):
    res = run_experiment(load_run_config("bare_sa/digits_denoise", SMALL + [f"out_dir={tmp_path}"]))
    ev = {k[5:]: v for k, v in res.final.items() if k.startswith("eval/")}
    assert {"peak_overlap", "overlap_t0", "nearest_t4", "mse_t1"} <= set(ev)
    assert all(math.isfinite(v) for v in ev.values())
    assert res.config.model.n_tokens == 16 and res.config.model.dim == 8 and res.config.model.objective == "vmf"


def test_clean_inputs_start_at_overlap_one():
    cfg = load_run_config("bare_sa/digits_denoise", SMALL + ["task.noise_level=0.0"])
    task = build_task(cfg)
    model = build_model(resolve(cfg, task), task)
    c = task.curves(model, "test", steps=2)
    assert c["overlap"][0] == pytest.approx(1.0, abs=1e-6) and c["mse"][0] < 1e-8
    assert len(c["nearest"]) == 3 and c["decoded"].shape == (3, 8, 1, 8, 8)
    # J = 0: x <- normalise(x), nothing moves
    assert c["overlap"][2] == pytest.approx(1.0, abs=1e-6)


def test_errors():
    with pytest.raises(ConfigError, match="task.patch = 3"):
        build_task(load_run_config("bare_sa/digits_denoise", ["task.patch=3"]))
    cfg = load_run_config("bare_sa/digits_denoise", ["model.objective=codebook"])
    with pytest.raises(ConfigError, match="model.objective = 'codebook': it fits discrete tokens"):
        resolve(cfg, build_task(cfg))   # an internal ValueError at the first step before
    cfg = load_run_config("bare_sa/digits_denoise", ["model.dim=9"])
    with pytest.raises(ConfigError, match="model.dim = 9: the embedded images have 8"):
        resolve(cfg, build_task(cfg))


@pytest.mark.parametrize("override, message", [
    ("task.images.validation=0", "task.images.validation = 0: must be a fraction in (0, 1) or a count >= 1"),
    ("task.images.validation=0.0", "task.images.validation = 0.0: must be a fraction in (0, 1) or a count >= 1"),
    ("task.noise_level=2", "task.noise_level = 2.0: with noise 'replace' it is the fraction of channel values "
                           "replaced, in [0, 1]"),
])
def test_settings_the_evaluation_cannot_use_are_refused_at_load(override, message):
    """an empty validation split trained, then reported NaN metrics with exit status 0; a replaced fraction above 1
    failed only at the first evaluation, after training"""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_run_config("bare_sa/digits_denoise", [override])
    gaussian = load_run_config("bare_sa/digits_denoise", ["task.noise=gaussian", "task.noise_level=2"])
    assert gaussian.task.noise_level == 2   # an angle's std, not a fraction


def test_a_batch_above_the_training_set_names_the_key():
    """it was 'denoise train batcher: N examples, fewer than batch_size', without the key; the Potts task likewise"""
    with pytest.raises(ConfigError, match=r"^task.batch_size = 100000 exceeds the \d+ training images"):
        build_task(load_run_config("bare_sa/digits_denoise", ["task.batch_size=100000"]))
    with pytest.raises(ConfigError, match=r"^task.batch_size = 100000 exceeds the \d+ training sequences"):
        build_task(load_run_config("bare_sa/potts_bare_sa", ["task.batch_size=100000"]))


def test_eval_says_how_many_images_and_what_noise(tmp_path):
    import argparse

    cfg = load_run_config("bare_sa/digits_denoise", ["task.eval_images=7"])
    task = build_task(cfg)
    model = build_model(resolve(cfg, task), task)
    what, metrics = task.eval_from_args(model, argparse.Namespace(split="test"), {})
    assert what == "denoise test split (7 images, noise replace 0.3)" and "peak_overlap" in metrics
