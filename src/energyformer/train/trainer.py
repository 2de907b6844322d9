"""The one trainer shared by every task. It knows nothing about the model, the energy or the data.

Contract with a task (DESIGN.md: config -> task -> trainer -> checkpoints + metrics):

* ``model``: an ``nn.Module``.
* ``loss_fn(model, batch) -> (loss, metrics)``: ``loss`` a scalar tensor, ``metrics`` a
  ``dict[str, float | Tensor]`` (a 0-dim tensor is best: it is read after the backward, with the loss, in one
  host transfer per step; a ``float()`` inside ``loss_fn`` stalls the device before the backward is queued) (logged
  as ``train/<name>``, averaged over micro-batches — weighted by their counted
  items with a ``count_fn``, a micro-batch that counts none left out; on DDP the values of rank 0). ``batch``
  is the tuple from ``next_batch()`` moved to the training device.
* ``train_data``: has ``next_batch() -> tuple[Tensor, ...]`` (CPU tensors; an iterator whose
  ``__next__`` returns the batch, like ``energyformer.data.LMBatcher``, works too), ``state_dict()`` and
  ``load_state_dict(d)`` so that the data position resumes exactly. The state must be made of
  tensors and plain Python values (it is saved with ``torch.save`` and read with
  ``weights_only=True``). Optional ``tokens_per_batch: int`` is used for tokens/s; otherwise
  ``batch[0].numel()`` is counted. Under ``torchrun`` build it **per rank** (see
  :func:`energyformer.train.dist_info`); the trainer does no sharding.
* Under DDP ``loss_fn`` receives the ``DistributedDataParallel`` wrapper: call ``model(...)``
  (its forward) so gradients are synchronised; reach other attributes through
  :func:`energyformer.train.unwrap_model`. With ``compile`` on it receives the compiled module
  (:mod:`energyformer.train.compiling`).
* ``eval_fn(model) -> dict[str, float]`` (optional): run every ``eval_every`` steps and at the
  end, under ``torch.no_grad()``, ``model.eval()`` and the precision's autocast, with all RNG
  states saved and restored around it (evaluation never changes the training stream). It
  receives the (possibly compiled, never CUDA-graphed) model, not the DDP wrapper, and runs on
  every rank (so it may shard and all-reduce); rank 0's result is logged (an ``eval`` event with ``elapsed_s`` and
  ``eval_s``, the seconds the evaluation took, so training time without evaluation can be read
  back). It moves its own data to ``next(model.parameters()).device``.

One optimiser step = ``grad_accum`` micro-batches, each from ``next_batch()``; each micro-batch
loss is divided by ``grad_accum`` before ``backward`` so the gradient is that of the mean loss; with
``count_fn`` (``Task.loss_items``), by the items it averages over (:mod:`~energyformer.train.accumulate`; the
step itself: :mod:`~energyformer.train.step`).

Optimiser (``train.optimizer`` kind), schedule (``train.schedule`` kind) and parameter groups by
role: :mod:`~energyformer.train.optim`, :mod:`~energyformer.train.schedule`,
:mod:`~energyformer.train.roles`. ``callbacks`` run after every optimiser step, before that step's
logging, evaluation and checkpoint (protocol: :mod:`~energyformer.train.callbacks`).

Resume is exact: ``fit(resume=True)`` restores weights, optimiser state (matched by parameter name,
:mod:`~energyformer.train.resume`), schedule position, callback state, the data state and every RNG
state (per rank), so on CPU in fp32 the loss at every later step equals that of
an uninterrupted run with the same seed (same machine, same torch intra-op thread count and world
size: float reductions depend on them). Fresh runs seed everything with ``seed + rank``; a task
should call :func:`energyformer.train.seed_everything` itself before building its model.
``fit(resume=False)`` refuses an ``out_dir`` that already holds checkpoints. On resume, events in
``metrics.jsonl`` (and TensorBoard) after the checkpoint's step are dropped, invalid newer
checkpoints are renamed ``ckpt-<step>.corrupt`` (kept, not deleted) with a warning, and a changed
``config.yaml`` is saved beside the original as ``config-resume-<step>.yaml``. A changed train
config (including one stored in the layout before optimiser/schedule kinds) is warned about and the
current one is used; a changed optimiser kind restores no optimiser state. A changed model or task
config is refused (:func:`~energyformer.train.resume.check_model_config`,
:func:`~energyformer.train.resume.check_task_config`), naming each key that differs. ``ckpt-<step>.tmp/``
folders left by a killed save are deleted on resume and by the next save.

Ctrl-C (``KeyboardInterrupt``, single process only): if the model and optimiser hold a completed
step (the interrupt came outside ``optimizer.step()`` and the callbacks after it), a checkpoint of that
step is written — with the data/RNG state from before the unfinished step and the model buffers it wrote put
back (:class:`~energyformer.train.signals.StepBuffers`), so resuming is still exact —
and the interrupt is re-raised. Under DDP nothing is saved on Ctrl-C (ranks cannot agree safely); resume
from the last periodic checkpoint. SIGTERM (single process) saves nothing and still ends the process
(exit 143); it first prints one line with the step reached and the last checkpoint.

The run directory is locked (:mod:`energyformer.train.lock`) for the whole of ``fit``: a second
training in the same directory fails at once with a message naming the holder.

A non-finite loss or gradient norm (checked with and without clipping) stops the run with :class:`TrainingDiverged`
before the optimiser step, so neither the weights nor any checkpoint see the bad state.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from energyformer.errors import UserError
from energyformer.utils.validate import ConfigError

from .accumulate import CountFn
from .callbacks import CallbackList
from .checkpoint import list_checkpoints, unwrap_model
from .compiling import compile_for_training
from .config import TrainConfig
from .contract import EvalFn, EvaluationFailed, EvaluationUserError, LossFn, TrainData, TrainingDiverged
from .device import resolve_device
from .distributed import destroy_distributed, dist_info, init_distributed
from .lock import RunDirLock
from .metrics import MetricsLogger, StepWindow
from .optim import build_optimizer
from .resume import eval_pending, find_resume_checkpoint, restore_run, save_run
from .rng import fork_rng, get_rng_state, seed_everything
from .roles import format_param_groups
from .runinfo import collect_run_info, write_config, write_run_info
from .schedule import LRSchedule
from .signals import StepBuffers, install_sigterm_note, save_on_interrupt
from .step import train_step

log = logging.getLogger("energyformer.train")

# ----------------------------------------------------------------------------------------------


class Trainer:
    """Train ``model`` with ``loss_fn`` on ``train_data``; write checkpoints and metrics to ``out_dir``.

    See the module docstring for the contract. ``run_config`` is the resolved experiment config
    (written to ``config.yaml``); without it the :class:`TrainConfig` is written. ``callbacks``:
    objects with ``on_step_end(trainer, step)`` and optionally ``on_train_start(trainer)``,
    ``state_dict()``/``load_state_dict()`` (see :mod:`energyformer.train.callbacks`); they can read
    the step's metrics in ``trainer.step_metrics``. ``normalise_model_config`` maps a recorded model
    config to today's spelling for the resume check (:func:`~energyformer.train.resume.check_model_config`).
    """

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        loss_fn: LossFn,
        train_data: TrainData,
        eval_fn: EvalFn | None = None,
        *,
        out_dir: str | Path,
        run_config: dict[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        normalise_model_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        count_fn: CountFn | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
        if not callable(loss_fn):
            raise TypeError("loss_fn must be callable: loss_fn(model, batch) -> (loss, metrics)")
        for attr in ("state_dict", "load_state_dict"):
            if not callable(getattr(train_data, attr, None)):
                raise TypeError(f"train_data must have a {attr}() method "
                                f"({type(train_data).__name__} has none)")
        if callable(getattr(train_data, "next_batch", None)):
            self._next_batch = train_data.next_batch
        elif callable(getattr(train_data, "__next__", None)):  # an iterator, e.g. data.LMBatcher
            self._next_batch = lambda: next(train_data)  # type: ignore[call-overload]
        else:
            raise TypeError(f"train_data must have a next_batch() method or be an iterator "
                            f"({type(train_data).__name__} is neither)")
        self.count_fn = count_fn  # count_fn(batch) -> the items its mean loss averages over (or None)
        if eval_fn is not None and not callable(eval_fn):
            raise TypeError("eval_fn must be callable: eval_fn(model) -> dict[str, float]")
        self.model = unwrap_model(model)
        self.cfg = cfg
        self.loss_fn = loss_fn
        self.train_data = train_data
        self.eval_fn = eval_fn
        self.out_dir = Path(out_dir)
        self.run_config = run_config
        self.run_info_extra = dict(run_info or {})  # fields added to run_info.json (e.g. the run's plugins)
        self.normalise_model_config = normalise_model_config  # old spellings -> today's (resume check)
        self.callbacks = CallbackList(callbacks)
        self.step_metrics: dict[str, float] = {}  # metrics of the step just taken (for callbacks)
        self.step = 0
        self.tokens_seen = 0
        self.loss_history: list[float] = []  # per-step loss of this fit() call
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: LRSchedule | None = None
        self.device: torch.device | None = None
        self.rank, self.world_size = 0, 1
        self.last_checkpoint: Path | None = None
        self._lock: RunDirLock | None = None
        self._owns_pg = False
        self._fitted = False

    # ------------------------------------------------------------------ setup

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def ddp(self) -> bool:
        return self.world_size > 1

    def _setup(self) -> None:
        cfg = self.cfg
        self.device = resolve_device(cfg.device)
        self._owns_pg = init_distributed(self.device)
        self.rank, self.world_size = dist_info()
        if cfg.precision == "bf16" and self.device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("train.precision = 'bf16': this GPU does not support bfloat16; use 'fp32'")
        self.model.to(self.device)
        self.optimizer = build_optimizer(self.model, cfg, self.device)
        self.scheduler = LRSchedule(self.optimizer, cfg.lr, cfg.steps, cfg.schedule)
        if self.is_main:
            log.info("%s", format_param_groups(self.model, cfg.no_decay_roles, cfg.lr_multipliers))
        m, self._eval_model = compile_for_training(self.model, cfg.compile, self.device)
        if self.ddp:
            m = nn.parallel.DistributedDataParallel(
                m, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=cfg.ddp_find_unused_parameters,
            )
        self._train_model = m

    def _autocast(self) -> contextlib.AbstractContextManager:
        assert self.device is not None
        if self.cfg.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ public

    def fit(self, resume: bool = False) -> dict[str, float]:
        """Train to ``cfg.steps``; with ``resume`` continue from the newest valid checkpoint.

        Returns the final metrics: ``step``, ``loss`` (last step), ``lr``, ``elapsed_s``,
        ``tokens`` and the last ``eval/<name>`` values. Call once per Trainer.
        """
        if self._fitted:
            raise RuntimeError("Trainer.fit() was already called; build a new Trainer "
                               "(use fit(resume=True) to continue a run)")
        self._fitted = True
        self._setup()
        self._lock = RunDirLock(self.out_dir).acquire() if self.is_main else None
        self._logger: MetricsLogger | None = None
        self._pbar = None
        on_term = install_sigterm_note(self)
        try:
            return self._fit(resume)
        finally:
            if on_term is not None and signal.getsignal(signal.SIGTERM) is on_term:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if self._pbar is not None:
                self._pbar.close()
            if self._logger is not None:
                self._logger.close()
            if self._owns_pg:
                destroy_distributed()
                self._owns_pg = False
            if self._lock is not None:
                self._lock.release()

    def evaluate(self) -> dict[str, float]:
        """Run ``eval_fn`` the way ``fit`` does (no grad, eval mode, RNG untouched)."""
        if self.eval_fn is None:
            return {}
        model = getattr(self, "_eval_model", self.model)
        was_training = model.training
        model.eval()
        try:
            with fork_rng(), torch.no_grad(), self._autocast():
                res = self.eval_fn(model)
        finally:
            model.train(was_training)
        return {f"eval/{k}": float(v) for k, v in res.items()}

    def eval_due(self, step: int) -> bool:
        """Whether ``step`` ends with an evaluation: every ``eval_every`` steps and the last."""
        cfg = self.cfg
        return self.eval_fn is not None and step > 0 and (
            bool(cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps)

    def _logged_evaluate(self) -> dict[str, float]:
        """:meth:`_checked_evaluate`, logged as this step's ``eval`` event (with its own seconds)."""
        t_eval = time.perf_counter()
        metrics = self._checked_evaluate()
        self._logger.log({"event": "eval", "step": self.step, "elapsed_s": self._elapsed(),
                          "eval_s": time.perf_counter() - t_eval, **metrics})
        return metrics

    def _checked_evaluate(self) -> dict[str, float]:
        """:meth:`evaluate` inside ``fit``: a failure is re-raised as :class:`EvaluationFailed`
        naming the step and the checkpoint that holds it (written before the evaluation)."""
        try:
            return self.evaluate()
        except (KeyboardInterrupt, TrainingDiverged):
            raise
        except Exception as err:  # noqa: BLE001 - re-raised with the run's state named
            ckpt = (str(self.last_checkpoint) if self.last_checkpoint is not None
                    and self._last_saved_step == self.step else None)
            cls = EvaluationUserError if isinstance(err, UserError) else EvaluationFailed
            raise cls(self.step, ckpt, err) from err

    # ------------------------------------------------------------------ resume

    def _restore(self, path: str) -> dict[str, Any]:
        return restore_run(self, path)

    # ------------------------------------------------------------------ checkpointing

    def _rank_state(self) -> dict[str, Any]:
        return {"data": copy.deepcopy(self.train_data.state_dict()), "rng": get_rng_state()}

    def _save(self, rank_state: dict[str, Any] | None = None) -> None:
        save_run(self, rank_state if rank_state is not None else self._rank_state())

    # ------------------------------------------------------------------ loop

    def _elapsed(self) -> float:
        return self._elapsed_before + (time.perf_counter() - self._t0)

    def _fit(self, resume: bool) -> dict[str, float]:
        cfg = self.cfg
        out = self.out_dir
        self._elapsed_before = 0.0
        self._t0 = time.perf_counter()
        resumed_from: str | None = None
        if resume:
            resumed_from = find_resume_checkpoint(out, self.is_main, self.ddp)
            if resumed_from is None:
                warnings.warn(f"resume: no valid checkpoint in {out} to continue from; training from scratch",
                              stacklevel=3)
        elif list_checkpoints(out):
            raise UserError(
                f"{out} already holds checkpoints ({', '.join(p.name for p in list_checkpoints(out))}); "
                "continue that run with --resume (Trainer.fit(resume=True)), or choose another out_dir"
            )
        if self.is_main:
            out.mkdir(parents=True, exist_ok=True)
        restored: dict[str, Any] = {}
        if resumed_from is not None:
            restored = self._restore(resumed_from)
        else:
            # each rank gets its own stream (dropout etc.); model init happened in the task
            seed_everything(cfg.seed + self.rank)
        self._last_saved_step = self.step if resumed_from is not None else -1
        self.callbacks.on_train_start(self)

        # metrics.jsonl first: a malformed line in it stops the run before the run records say it resumed
        self._logger = MetricsLogger(out, enabled=self.is_main, tensorboard=cfg.tensorboard,
                                     resume_step=self.step)
        if self.is_main:
            info = collect_run_info(cfg.seed, self.device, self.world_size)  # type: ignore[arg-type]
            config = self.run_config if self.run_config is not None else {"train": cfg.to_dict()}
            write_config(out, config, resume_step=self.step if resumed_from else None)
            write_run_info(out, info, resume=(
                {"step": self.step, "checkpoint": resumed_from} if resumed_from else None), extra=self.run_info_extra)

        from tqdm.auto import tqdm

        self._pbar = tqdm(total=cfg.steps, initial=self.step, desc="train", dynamic_ncols=True,
                          disable=not (cfg.progress and self.is_main))
        final: dict[str, float] = {}
        eval_metrics: dict[str, float] = {}
        model = self._train_model
        model.train()
        tokens_per_micro = getattr(self.train_data, "tokens_per_batch", None)
        self._window = window = StepWindow()
        window.load_state_dict(restored.get("window"))  # the steps since the last train event before the stop
        if resumed_from is not None and eval_pending(self, self._logger.kept):
            with window.excluded():  # tokens/s counts training steps only (the eval has its own eval_s)
                eval_metrics = self._logged_evaluate()  # the checkpoint's own evaluation, lost to the stop
        self._in_step = False
        self._in_update: int | None = None  # number of the step being applied (update + callbacks)
        snapshot: dict[str, Any] | None = None
        buffers = None if self.ddp else StepBuffers(self.model)
        try:
            while self.step < cfg.steps:
                if buffers is not None:
                    snapshot = self._rank_state()  # for an exact save on Ctrl-C mid-step
                    buffers.take()
                self._in_step = True
                loss_val, metrics, ntok, gn = self._train_step(model, tokens_per_micro)
                self._in_step = False
                if buffers is not None:
                    buffers.after_step()
                self.loss_history.append(loss_val)
                ntok *= self.world_size
                self.tokens_seen += ntok
                window.add(loss_val, metrics, ntok, gn)
                is_last = self.step == cfg.steps
                if (cfg.log_every and self.step % cfg.log_every == 0) or is_last:
                    event = window.event(self.step, self.scheduler.get_lr(self.step - 1),
                                         self.tokens_seen, self._elapsed())
                    self._logger.log(event)
                    self._pbar.set_postfix(loss=f"{event['loss']:.4g}",
                                           tok_s=f"{event['tokens_per_s']:.3g}", refresh=False)
                    if self.is_main and self._pbar.disable:
                        log.info("step %d/%d loss %.4g lr %.3g tok/s %.3g", self.step, cfg.steps,
                                 event["loss"], event["lr"], event["tokens_per_s"])
                    final.update({k: v for k, v in event.items() if k != "event"})
                # the checkpoint first: a failing evaluation never costs the step's weights; neither
                # counts in the next window's tokens/s (the throughput of training steps only)
                with window.excluded():
                    if (cfg.save_every and self.step % cfg.save_every == 0) or is_last:
                        self._save()
                    if self.eval_due(self.step):
                        eval_metrics = self._logged_evaluate()
                self._pbar.update(1)
        except KeyboardInterrupt:
            save_on_interrupt(self, snapshot, buffers)
            raise
        except TrainingDiverged as e:
            self._logger.log({"event": "diverged", "step": e.step, e.what.replace(" ", "_"): e.value,
                              "elapsed_s": self._elapsed()})
            raise
        if not self.loss_history and self.eval_fn is not None and not eval_metrics:  # resumed at the end
            eval_metrics = self._checked_evaluate()
        final.update(eval_metrics)
        final["step"] = self.step
        if self.loss_history:
            final["loss"] = self.loss_history[-1]
        elif restored.get("loss") is not None:  # resumed at the end: the checkpoint's last step
            final["loss"] = restored["loss"]
        if "lr" not in final and self.step > 0:
            final["lr"] = self.scheduler.get_lr(self.step - 1)
        final["elapsed_s"] = self._elapsed()
        final["tokens"] = self.tokens_seen
        return final

    def _train_step(self, model: nn.Module, tokens_per_micro: int | None
                    ) -> tuple[float, dict[str, float], int, float | None]:
        return train_step(self, model, tokens_per_micro)

    @property
    def applying_step(self) -> bool:
        """Whether :meth:`fit` is applying a step now (optimiser update and callbacks): a Ctrl-C there saves nothing
        (the state is not a complete step), so a caller that stops runs by Ctrl-C waits until this is False."""
        return getattr(self, "_in_update", None) is not None
