"""Every config that ``energyformer list configs`` lists trains for 2 steps at toy size and evaluates.

Each config keeps its task, model kind, sublayer kinds, optimiser and schedule; the overrides below only
shrink sizes (width, depth, batch, evaluation sets) by task kind and model kind, so a config that cannot
run (an unknown key, a kind that fails to build, a task that cannot evaluate) fails here. The data of the
tasks that generate it (Sudoku, Potts) stay at the config's settings so the prepared cache is hit.
"""

from __future__ import annotations

import functools

import pytest

from energyformer.experiment import known_configs, load_run_config, run_experiment
from energyformer.tasks import classification, masked_images

TRAIN = ["train.steps=2", "train.eval_every=0", "train.save_every=0", "train.log_every=1",
         "train.progress=false", "train.tensorboard=false", "train.device=cpu"]

#: toy sizes by task kind (the task's evaluation sets and batches)
TASK = {
    "lm": ["task.seq_len=16", "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1"],
    "sudoku": ["task.batch_size=2", "task.eval_batch_size=8", "task.eval_max=8"],
    "potts_mlm": ["task.batch_size=8", "task.eval_sequences=16", "task.calibrate_sequences=32",
                  "task.eval_iterations=[1,2]"],
    "image_classification": ["task.batch_size=8", "task.eval_batch_size=16", "task.train_examples=32",
                             "task.eval_examples=16"],
    "masked_image_modelling": ["task.batch_size=8", "task.eval_batch_size=16", "task.train_examples=32",
                               "task.eval_examples=8", "task.decode_steps=2", "task.codebook_size=16",
                               "task.tokenizer_images=64", "task.cache_tokenizer=false"],
    "denoise": ["task.batch_size=8", "task.n_train=32", "task.eval_images=8", "task.eval_steps=2",
                "task.report_steps=[0,1,2]", "task.nearest_train=32"],
    "parity": ["task.batch_size=4", "task.eval_batch_size=16", "task.data.n_test=16"],
}
#: toy sizes by model kind (configs that set a width keep their heads; dim 32 divides by 1, 2, 4, 8)
MODEL = {
    "transformer": ["model.dim=32", "model.n_layers=1", "model.max_seq_len=81"],
    "equilibrium": ["model.dim=32", "model.n_layers=1"],
    "vision": ["model.dim=32"],
    "masked_vision": ["model.dim=32"],
}
#: (config, extra overrides) where a config's own numbers do not fit the toy size
EXTRA = {
    "lm": ["model.max_seq_len=16"],
    "sudoku": ["model.max_seq_len=81"],
}
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


def toy_overrides(name: str, tmp_path) -> list[str]:
    cfg = load_run_config(name)
    task, model = cfg.task.kind, cfg.model.kind
    ov = TRAIN + TASK.get(task, []) + MODEL.get(model, []) + EXTRA.get(task, [])
    return ov + [f"out_dir={tmp_path}", f"name={name.replace('/', '_')}"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in known_configs()])
def test_listed_config_trains_two_steps(name, tmp_path):
    cfg = load_run_config(name, toy_overrides(name, tmp_path))
    res = run_experiment(cfg)
    assert len(res.loss_history) == 2
    assert all(v == v and abs(v) != float("inf") for v in res.loss_history), res.loss_history
    assert (res.run_dir / "config.yaml").is_file()
    assert list(res.run_dir.glob("ckpt-*")), "no checkpoint written"
