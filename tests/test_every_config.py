"""Every config that ``energyformer list configs`` lists trains for 2 steps at toy size and evaluates.

Each config keeps its task, model kind, sublayer kinds, optimiser and schedule; the overrides
(``tests/fixtures/toy_configs.py``) only shrink sizes by task kind and model kind, so a config that cannot
run (an unknown key, a kind that fails to build, a task that cannot evaluate) fails here.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from energyformer.experiment import known_configs, load_run_config, run_experiment
from energyformer.tasks import classification, masked_images

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from toy_configs import toy_overrides  # noqa: E402

SLOW = {"images/mim_hyperset", "images/mim_hyperset_wide", "images/mim_transformer"}


@pytest.fixture(scope="module", autouse=True)
def _load_images_once():
    """Decode each image set once for the whole module (27 image configs share two sets)."""
    mp = pytest.MonkeyPatch()
    cached = functools.lru_cache(maxsize=None)(classification.load_image_dataset)
    for mod in (classification, masked_images):
        mp.setattr(mod, "load_image_dataset", cached)
    yield
    mp.undo()


class _NoGradient:
    """Names the trainable parameters left without a gradient by a training step: DistributedDataParallel stops
    on them (nag_mha / momen_mha did: layer 0's learned momentum β acted on no velocity); and the biases
    decayed as weights (a parameter whose name ends in "bias" with the role 'weight': CRATE's learned output
    bias ``out_bias`` was, where the library says a bias is never decayed)."""

    def __init__(self):
        self.missing: set[str] = set()
        self.decayed_biases: list[str] = []

    def on_step_end(self, trainer, step):
        from energyformer.train import param_roles

        self.missing |= {n for n, p in trainer.model.named_parameters() if p.requires_grad and p.grad is None}
        self.decayed_biases = [n for n, r in param_roles(trainer.model).items()
                               if n.rsplit(".", 1)[-1].endswith("bias") and r == "weight"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in known_configs()])
def test_listed_config_trains_two_steps(name, tmp_path):
    cfg = load_run_config(name, toy_overrides(name, tmp_path, name.replace("/", "_"), ["train.device=cpu"]))
    probe = _NoGradient()
    res = run_experiment(cfg, callbacks=[probe])
    assert not probe.missing, f"parameters without a gradient (DDP stops on them): {sorted(probe.missing)}"
    assert not probe.decayed_biases, f"biases with the role 'weight' (decayed): {probe.decayed_biases}"
    assert len(res.loss_history) == 2
    assert all(v == v and abs(v) != float("inf") for v in res.loss_history), res.loss_history
    assert (res.run_dir / "config.yaml").is_file()
    assert list(res.run_dir.glob("ckpt-*")), "no checkpoint written"
