"""The configs of the CUDA smoke tests (tests/train/test_cuda.py) load and build on CPU.

CI has no GPU, so a config key renamed since the CUDA tests last ran (the GP regressor's ``model.steps``
became ``model.block.steps``) would only show on a GPU machine; this checks every one of them here.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from energyformer.experiment import build_task, load_run_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from toy_configs import CUDA_KINDS, toy_overrides  # noqa: E402


@pytest.mark.parametrize("kind", list(CUDA_KINDS))
def test_cuda_test_config_loads_and_builds_on_cpu(kind, tmp_path):
    config, base = CUDA_KINDS[kind]
    overrides = toy_overrides(config, tmp_path, kind, base) + ["train.device=cpu", "train.precision=fp32"]
    cfg = load_run_config(config, overrides)
    task = build_task(cfg)
    model = task.build_model(task.resolve_model_config(cfg.model))
    assert sum(p.numel() for p in model.parameters()) > 0
