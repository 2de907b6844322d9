"""A model key the task sets (vocabulary, input size, classes, image shape) given another value in the config is
refused in one line naming it; it used to be replaced without a word (``--set model.vocab_size=10`` trained a
4096-token model and ``config`` showed 10). The key's default and the task's own value stay accepted."""

from __future__ import annotations

import pytest

from energyformer.experiment import build_task, load_run_config, resolve
from energyformer.utils.validate import ConfigError

DIGITS = ["task.dataset=digits", "model.patch_size=4"]
CASES = [
    ("lm/llama", ["task.tokenizer=bytes"], "model.vocab_size=10", "model.vocab_size = 10: the 'lm' task sets it (256"),
    ("gp/cem_t1", [], "model.in_dim=3", "model.in_dim = 3: the 'gp' task sets it (10"),
    ("images/hyperset", DIGITS, "model.n_classes=3", "model.n_classes = 3: the 'image_classification'"),
    ("images/hyperset", DIGITS, "model.channels=3", "model.channels = 3"),
]


@pytest.mark.parametrize("name, base, bad, message", CASES)
def test_a_task_set_key_given_another_value_is_refused(name, base, bad, message):
    cfg = load_run_config(name, base + [bad])
    with pytest.raises(ConfigError) as err:
        resolve(cfg, build_task(cfg))
    assert str(err.value).startswith(message) and "leave model." in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name, base, bad, message", CASES)
def test_the_tasks_own_value_and_the_default_are_accepted(name, base, bad, message):
    cfg = load_run_config(name, base)
    task = build_task(cfg)
    resolved = resolve(cfg, task)
    key = bad.split("=")[0]
    value = getattr(resolved.model, key.split(".")[1])
    again = load_run_config(name, base + [f"{key}={value}"])  # e.g. a run's own config.yaml: the resolved values
    assert resolve(again, task).model == resolved.model
