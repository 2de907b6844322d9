"""What a task hands the trainer (``loss_fn``, ``eval_fn``, ``train_data``) and what a diverging run
raises. The full contract is in :mod:`energyformer.train.trainer`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from ..errors import UserError

LossFn = Callable[[nn.Module, tuple], "tuple[torch.Tensor, dict[str, float]]"]
EvalFn = Callable[[nn.Module], "dict[str, float]"]


class TrainData(Protocol):
    """What the trainer needs from a data source (``tokens_per_batch`` is optional)."""

    def next_batch(self) -> tuple[torch.Tensor, ...]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, d: dict) -> None: ...


class TrainingDiverged(UserError, RuntimeError):
    """The loss (or gradient norm) became NaN/inf; no optimiser step or checkpoint was made of it."""

    def __init__(self, step: int, value: float, what: str = "loss",
                 last_checkpoint: str | None = None, train_cfg: Any = None) -> None:
        self.step = step
        self.value = value
        self.loss = value
        self.what = what
        self.last_checkpoint = last_checkpoint
        where = (f"the last good checkpoint is {last_checkpoint}" if last_checkpoint
                 else "no checkpoint was written in this run")
        # the remedies the run does not already use (it advised fp32 to a run in fp32)
        tries = ["a lower train.lr"]
        if train_cfg is None or not getattr(train_cfg, "grad_clip", 0):
            tries.append("train.grad_clip > 0")
        if train_cfg is None or getattr(train_cfg, "precision", None) != "fp32":
            tries.append("train.precision='fp32'")
        advice = ", ".join(tries[:-1]) + " or " + tries[-1] if len(tries) > 1 else tries[0]
        super().__init__(
            f"training diverged at step {step}: {what} = {value} is not finite. Stopped before the "
            f"optimizer step; {where}. Try {advice}."
        )


class EvaluationFailed(RuntimeError):
    """An evaluation during or after training raised; the checkpoint of that step was written first.

    ``__cause__`` is the original error. A user error (a bad task option) surfaces as
    :class:`EvaluationUserError` so the CLI prints it as one line with exit code 2.
    """

    def __init__(self, step: int, checkpoint: str | None, cause: BaseException) -> None:
        self.step, self.checkpoint = step, checkpoint
        saved = (f"checkpoint {checkpoint} holds step {step}" if checkpoint
                 else "no checkpoint was written (train.save_every = 0 and not the last step)")
        detail = str(cause) if isinstance(cause, UserError) else f"{type(cause).__name__}: {cause}"
        super().__init__(f"evaluation at step {step} failed ({detail}); training stopped, {saved}; "
                         f"after fixing the cause, `energyformer eval RUN_DIR` evaluates it or "
                         f"`--resume` continues the run")


class EvaluationUserError(EvaluationFailed, UserError):
    """:class:`EvaluationFailed` whose cause is a user error (bad value, data problem)."""
