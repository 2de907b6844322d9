"""One trainer for every task: optimiser and schedule by kind, parameter groups by role, callbacks,
precision, checkpoints, logging, DDP.

A task plugs in with a model, ``loss_fn(model, batch) -> (loss, metrics)``, a ``train_data`` object
with ``next_batch()/state_dict()/load_state_dict()`` and an optional ``eval_fn(model)``::

    from energyformer.train import AnnealCallback, TrainConfig, Trainer

    cfg = TrainConfig(steps=2000, lr=2e-3, precision="bf16", eval_every=200,
                      optimizer={"kind": "sgd", "momentum": 0.9, "nesterov": True},
                      schedule={"kind": "warmup_linear", "warmup": 0.02})
    trainer = Trainer(model, cfg, loss_fn, train_data, eval_fn, out_dir="runs/cem-tiny",
                      run_config=resolved_config_dict,
                      callbacks=[AnnealCallback("gamma", start=10.0, end=1.0, steps=500)])
    final = trainer.fit(resume=args.resume)

See :mod:`energyformer.train.trainer` for the full contract, :mod:`energyformer.train.roles` for
parameter roles, :mod:`energyformer.train.callbacks` for the callback protocol and
:mod:`energyformer.train.checkpoint` for the on-disk format.
"""

from .callbacks import AnnealCallback, Callback, ProjectionCallback
from .checkpoint import (
    CheckpointError,
    latest_checkpoint,
    checkpoint_step,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
    unwrap_model,
    verify_checkpoint,
)
from .config import TrainConfig
from .device import resolve_device
from .distributed import dist_info, is_main_process
from .optim import OPTIMIZERS, build_optimizer, param_groups
from .rng import fork_rng, get_rng_state, seed_everything, set_rng_state
from .roles import (
    ROLES,
    declare_param_roles,
    describe_param_groups,
    format_param_groups,
    param_roles,
    register_module_role,
)
from .schedule import SCHEDULES, LRSchedule, lr_factor
from .trainer import Trainer, TrainingDiverged

__all__ = [
    "AnnealCallback", "Callback", "CheckpointError", "LRSchedule", "OPTIMIZERS", "ProjectionCallback",
    "ROLES", "SCHEDULES", "TrainConfig", "Trainer", "TrainingDiverged", "build_optimizer",
    "declare_param_roles", "describe_param_groups", "dist_info", "fork_rng", "format_param_groups",
    "checkpoint_step", "get_rng_state", "is_main_process", "latest_checkpoint", "latest_valid_checkpoint",
    "list_checkpoints", "load_checkpoint", "load_model_weights", "lr_factor", "param_groups",
    "param_roles", "register_module_role", "resolve_device", "save_checkpoint", "seed_everything",
    "set_rng_state", "unwrap_model", "verify_checkpoint",
]
