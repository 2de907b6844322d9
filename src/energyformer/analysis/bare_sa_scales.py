"""The scales of ``energyformer reproduce bare-sa``: optimiser steps per stage (and the overrides of the
``tiny`` smoke test). Shared by the runner (``reproduce/bare_sa.py``) and the page
(:mod:`.bare_sa_report`, which states the steps of the scale a ``results.json`` was made at).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    potts_steps: int
    eval_every: int
    sweep_steps: int
    digits_steps: int
    mnist_steps: int
    mnist_train: int
    overrides: tuple[str, ...] = ()      # applied to every Potts run (tiny: a small data set)
    image_overrides: tuple[str, ...] = ()
    memory: bool = True


SCALES = {
    "cpu": Scale(2000, 100, 800, 1000, 500, 10000),
    # half the optimiser steps of `cpu`, same data and models: fits about 30 min on one shared core
    "short": Scale(1000, 100, 400, 600, 300, 5000),
    "tiny": Scale(6, 3, 3, 4, 0, 256, overrides=(
        "task.data.L=6", "task.data.C=3", "task.data.n_train=640", "task.data.n_test=128",
        "task.data.burn_in=50", "task.data.samples_per_chain=8", "task.n_validation=128",
        "task.batch_size=32", "task.eval_iterations=[1,2]", "task.calibrate_sequences=64"),
        image_overrides=("task.eval_images=16", "task.eval_steps=4", "task.report_steps=[0,1,4]",
                         "task.nearest_train=100", "task.n_train=128"), memory=False),
}
