"""One optimiser step of :class:`~energyformer.train.trainer.Trainer`: ``grad_accum`` micro-batches, the
divergence checks, the update and the callbacks.

Each micro-batch's loss is weighed by :class:`~energyformer.train.accumulate.StepPlan` (``1 / accum``, or by the
items it counts with a ``count_fn``) before its backward; under DDP every micro-batch but the last skips the
gradients' all-reduce (``no_sync``), and a last micro-batch that counts no item runs a backward of zeros so every rank
joins it. The loss, every 0-dim tensor metric and the gradient norm reach the host in one transfer, the step's one
sync. A non-finite loss or gradient norm (checked with and without clipping) raises
:class:`~energyformer.train.contract.TrainingDiverged` before ``optimizer.step()``, so neither the weights nor any
checkpoint see the bad state.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .accumulate import StepPlan, all_reduce_int
from .contract import TrainingDiverged


def grad_norm(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_(params, max_norm)``'s norm tensor (no host read), split in its two halves (torch >= 2.6) so
    that ``max_norm`` 0 (no clipping) skips the second: its ``inf`` multiplied every gradient by 1.0 each step."""
    if not hasattr(torch.nn.utils, "clip_grads_with_norm_"):  # pragma: no cover - torch < 2.6
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    total = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def _move(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    return x


def train_step(trainer: Any, model: nn.Module, tokens_per_micro: int | None
               ) -> tuple[float, dict[str, float], int, float | None]:
    """Take ``trainer``'s next optimiser step with ``model`` (the training wrapper: compiled and/or DDP).

    Returns ``(loss, metrics, tokens, grad_norm)``: the step's mean loss, its metrics averaged over micro-batches
    (floats), the tokens this rank read and the gradient norm before clipping. Advances ``trainer.step`` and runs
    the callbacks (their metrics go to the trainer's step window); ``trainer.applying_step`` is True from the
    optimiser update until the callbacks are done.
    """
    cfg = trainer.cfg
    assert trainer.optimizer is not None and trainer.scheduler is not None and trainer.device is not None
    accum = cfg.grad_accum
    trainer.optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=trainer.device, dtype=torch.float32)
    msum: dict[str, Any] = {}  # name -> float, or a 0-dim tensor on the device
    ntok = 0
    plan = StepPlan(trainer._next_batch, accum, trainer.count_fn, trainer.world_size,
                    functools.partial(all_reduce_int, device=trainer.device) if trainer.ddp else None)
    for i in range(accum):
        batch = plan.batch(i)
        ntok += int(tokens_per_micro) if tokens_per_micro is not None else int(batch[0].numel())
        last = i == accum - 1
        if plan.empty(i) and not (trainer.ddp and last):
            continue  # no item to learn from (its mean loss is NaN): weight 0, nothing to add
        batch = tuple(_move(b, trainer.device) for b in batch)
        sync = (model.no_sync() if trainer.ddp and not last  # type: ignore[operator]
                else contextlib.nullcontext())
        with sync:
            with trainer._autocast():
                loss, metrics = trainer.loss_fn(model, batch)
            if plan.empty(i):  # DDP's last micro-batch: the gradients' all-reduce needs a backward, of zeros
                sum(p.sum() for p in model.parameters() if p.requires_grad).mul(0.0).backward()
                continue
            plan.backward(i, loss)
        loss_share, metric_share = plan.share(i)
        total += loss.detach().float() * loss_share
        for k, v in (metrics or {}).items():  # a tensor stays on the device: no host sync per metric
            v = v.detach().float().reshape(()) if torch.is_tensor(v) else float(v)
            msum[k] = msum.get(k, 0.0) + v * metric_share
    mean = total / accum
    if trainer.ddp:
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        mean = mean / trainer.world_size
    # the gradient norm (checked even without clipping: an inf/NaN gradient with a finite loss would poison the
    # weights), the loss and every tensor metric reach the host in one transfer, the step's one sync
    gn_t = grad_norm(list(trainer.model.parameters()), cfg.grad_clip)
    on_device = [k for k, v in msum.items() if torch.is_tensor(v)]
    rdt = torch.promote_types(torch.float32, gn_t.dtype)  # a float64 model's norm is read in float64
    loss_val, *vals, gn = torch.stack([mean.reshape(()).to(rdt), *(msum[k].to(mean.device, rdt) for k in on_device),
                                       gn_t.reshape(()).to(mean.device, rdt)]).tolist()
    msum.update(zip(on_device, vals))
    ckpt = str(trainer.last_checkpoint) if trainer.last_checkpoint is not None else None
    if not math.isfinite(loss_val):
        raise TrainingDiverged(trainer.step + 1, loss_val, "loss", ckpt, cfg)
    if not math.isfinite(gn):
        raise TrainingDiverged(trainer.step + 1, gn, "gradient norm", ckpt, cfg)
    metrics = {k: v / accum for k, v in msum.items()}
    trainer._in_update = trainer.step + 1  # until the callbacks are done, not a complete step
    lr = trainer.scheduler.get_lr()
    trainer.optimizer.step()
    trainer.scheduler.step()
    trainer.step += 1
    if len(trainer.callbacks):
        trainer.step_metrics = {"loss": loss_val, "lr": lr,
                                **({"grad_norm": gn} if gn is not None else {}),
                                **{f"train/{k}": v for k, v in metrics.items()}}
        trainer._window.callback_metrics.update(trainer.callbacks.on_step_end(trainer, trainer.step))
    trainer._in_update = None
    return loss_val, metrics, ntok, gn
