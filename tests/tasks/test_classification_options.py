"""``task.root`` (CIFAR only) and ``task.label_mode = coarse`` (CIFAR-100 only) on a set that does not read them
are one-line ConfigErrors, for image classification and the image config of other tasks (they used to be
accepted and ignored: the run gave the same numbers as without them)."""

from __future__ import annotations

import pytest

from energyformer.errors import ConfigError
from energyformer.experiment import load_run_config
from energyformer.utils.config import from_dict, to_dict

TASK = ["task.kind=image_classification"]


@pytest.mark.parametrize("sets, msg", [
    (["task.dataset=digits", "task.label_mode=coarse"],
     r"^task\.label_mode = 'coarse': only for dataset cifar100 \(dataset is digits\)$"),
    (["task.dataset=cifar10", "task.label_mode=coarse"],
     r"^task\.label_mode = 'coarse': only for dataset cifar100 \(dataset is cifar10\)$"),
    (["task.dataset=mnist", "task.root=/tmp"],
     r"^task\.root = '/tmp': only for datasets cifar10, cifar100 \(dataset is mnist"),
    (["task.kind=denoise", "task.images.label_mode=coarse"],
     r"^task\.images\.label_mode = 'coarse': only for dataset cifar100 \(dataset is digits\)$"),
    (["task.kind=denoise", "task.images.root=/tmp"], r"^task\.images\.root = '/tmp': only for datasets cifar10"),
])
def test_option_for_another_dataset_refused(sets, msg):
    """Old: all five loaded, and training ignored the option."""
    with pytest.raises(ConfigError, match=msg):
        load_run_config(None, (TASK if sets[0] != "task.kind=denoise" else []) + sets)


def test_cifar_options_apply_only_to_their_sets():
    """Old: accepted everywhere; now accepted exactly where they are read, and a resolved config (every key
    listed, at its default where it does not apply) loads again."""
    for sets in (["task.dataset=cifar100", "task.label_mode=coarse", "task.root=/data/c100.tar.gz"],
                 ["task.dataset=cifar10", "task.root=/data/c10"], ["task.dataset=digits", "task.label_mode=fine"]):
        cfg = load_run_config(None, TASK + sets)
        assert from_dict(type(cfg), to_dict(cfg)).task == cfg.task
        with pytest.raises(ConfigError, match="only for dataset"):
            load_run_config(None, TASK + sets + ["task.dataset=fashion_mnist", "task.label_mode=coarse"])
