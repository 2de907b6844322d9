"""``Task.without_data``: the task object with only the base initialiser run (what the study preflight builds every
run's model with on the meta device): its config, seed and rank set, no data built, a model config resolved as the
real task resolves it where that reads the config alone, and a method that needs the data fails loudly rather than
giving a number."""

import pytest

from energyformer.experiment import build_task, load_run_config
from energyformer.tasks import TASKS
from energyformer.utils.config import to_dict


def test_without_data_builds_no_data_and_resolves_like_the_real_task():
    cfg = load_run_config("gp/plain", ["task.n_train=64", "task.n_test=16", "task.batch_size=8"])
    cls = TASKS.get(cfg.task.kind).builder
    light = cls.without_data(cfg.task, seed=7, rank=1)
    assert type(light) is cls and light.cfg is cfg.task and (light.seed, light.rank) == (7, 1)
    assert light.train_data is None and light.checkpoint is None
    real = build_task(cfg)
    assert real.train_data is not None
    assert to_dict(light.resolve_model_config(cfg.model)) == to_dict(real.resolve_model_config(cfg.model))
    with pytest.raises(AttributeError):
        light.evaluate(None)  # needs the data the light task never built


def test_without_data_fails_loudly_where_resolution_needs_the_data():
    """The language-model task takes its vocabulary from its tokenised corpus: the light task raises (the preflight
    then builds the real task), never resolves a model with a wrong vocabulary."""
    cfg = load_run_config("lm/llama", ["model.dim=16", "model.n_layers=1", "model.heads=2"])
    light = TASKS.get(cfg.task.kind).builder.without_data(cfg.task)
    with pytest.raises(AttributeError):
        light.resolve_model_config(cfg.model)
