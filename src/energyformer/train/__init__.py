"""One trainer for every task: AdamW, warm-up + cosine schedule, precision, checkpoints, logging, DDP.

A task plugs in with a model, ``loss_fn(model, batch) -> (loss, metrics)``, a ``train_data`` object
with ``next_batch()/state_dict()/load_state_dict()`` and an optional ``eval_fn(model)``::

    from energyformer.train import Trainer, TrainConfig

    cfg = TrainConfig(steps=2000, lr=2e-3, precision="bf16", eval_every=200)
    trainer = Trainer(model, cfg, loss_fn, train_data, eval_fn, out_dir="runs/cem-tiny",
                      run_config=resolved_config_dict)
    final = trainer.fit(resume=args.resume)

See :mod:`energyformer.train.trainer` for the full contract and
:mod:`energyformer.train.checkpoint` for the on-disk format.
"""

from .checkpoint import (
    CheckpointError,
    latest_checkpoint,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
    unwrap_model,
    verify_checkpoint,
)
from .config import TrainConfig
from .distributed import dist_info, is_main_process
from .rng import fork_rng, get_rng_state, seed_everything, set_rng_state
from .schedule import WarmupCosineSchedule, lr_factor
from .optim import build_optimizer, param_groups, resolve_device
from .trainer import Trainer, TrainingDiverged

__all__ = [
    "CheckpointError", "TrainConfig", "Trainer", "TrainingDiverged", "WarmupCosineSchedule",
    "build_optimizer", "dist_info", "fork_rng", "get_rng_state", "is_main_process",
    "latest_checkpoint", "latest_valid_checkpoint", "list_checkpoints", "load_checkpoint",
    "load_model_weights", "lr_factor", "param_groups", "resolve_device", "save_checkpoint",
    "seed_everything", "set_rng_state", "unwrap_model", "verify_checkpoint",
]
