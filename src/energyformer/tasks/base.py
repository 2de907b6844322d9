"""Tasks as first-class objects (DESIGN.md "tasks/"): task = data + model + loss + metrics + eval.

A run config selects its task by kind (``task: {kind: lm, ...}`` / ``{kind: gp, ...}``); the kind picks
the task's config class from :data:`TASKS`, so only that kind's keys are allowed. ``train``, ``eval``,
``list tasks`` and ``reproduce`` go through the registry; nothing in the CLI knows a particular task.

A task class subclasses :class:`Task` and is registered with its config::

    class ParityConfig(TaskConfig):
        kind: Literal["parity"] = "parity"
        length: int = Field(64, ge=1)

    @register_task("parity", ParityConfig)
    class ParityTask(Task):
        model_kinds = ("transformer",)       # the first is the default model kind
        def build_model(self, model_cfg): ...
        ...

The trainer contract (:mod:`energyformer.train.trainer`) is met by ``task.train_data``,
``task.loss`` and ``task.eval_fn()``; auxiliary losses that blocks put in ``ForwardContext.aux_losses``
reach the task in the model's ``ModelOutput`` and are added in one place, :meth:`Task.add_aux_losses`.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from ..utils.config import KindConfig, Registry
from ..utils.validate import ConfigError

#: task kind -> (config class, Task subclass). ``energyformer list tasks`` prints it.
TASKS = Registry("task")


def _in_eval_mode(evaluate: Callable) -> Callable:
    """``evaluate(self, model, ...)`` with ``model`` in eval mode, its mode restored after (:class:`Task`)."""

    @functools.wraps(evaluate)
    def wrapper(self, model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, float]:
        was = model.training
        model.eval()
        try:
            return evaluate(self, model, *args, **kwargs)
        finally:
            model.train(was)

    return wrapper


class TaskConfig(KindConfig):
    """Base of every task config (data, batch sizes, task-specific options)."""


def check_batch_size(batch_size: int, n: int, what: str, hint: str = "") -> None:
    """One-line ConfigError naming ``task.batch_size`` when it exceeds the ``n`` training examples (``what``: how
    to name them) a task batches from: the batcher's own error names no key."""
    if batch_size > n:
        raise ConfigError(f"task.batch_size = {batch_size} exceeds the {n} {what}{hint}")


def register_task(name: str, config: type[TaskConfig], doc: str | None = None):
    """Class decorator registering a :class:`Task` subclass under ``name`` with its config class."""

    def deco(cls: type[Task]) -> type[Task]:
        cls.name = name
        TASKS.register(name, config, doc)(cls)
        return cls

    return deco


class Task:
    """Base class: builds data, model, loss and metrics; evaluates and summarises a model.

    Subclasses set ``model_kinds`` and implement :meth:`build_model`, :meth:`loss`, :meth:`evaluate`
    and the ``train_data`` attribute (an object with ``next_batch()``/``state_dict()``/
    ``load_state_dict()``). Construction may be expensive (tokenising a corpus); it happens once per
    run, per rank (``rank`` lets a task give each DDP rank its own data stream). A subclass's
    :meth:`evaluate` always runs with the model in eval mode (set here, the caller's mode restored after):
    in training mode a model samples its iteration count, drops out, or (EqT) refines with K_train steps.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "evaluate" in cls.__dict__:
            cls.evaluate = _in_eval_mode(cls.__dict__["evaluate"])

    name: ClassVar[str] = ""
    #: model kinds this task can build; the first is the default when a config gives none
    model_kinds: ClassVar[tuple[str, ...]] = ("transformer",)
    #: whether ``energyformer generate`` works for this task
    can_generate: ClassVar[bool] = False
    #: the metric ``reproduce``/``train`` summaries lead with, and whether lower is better
    main_metric: ClassVar[str] = "loss"
    lower_is_better: ClassVar[bool] = True
    #: whether ``energyformer eval --split`` chooses what is evaluated (else it is an error)
    has_splits: ClassVar[bool] = True
    #: what the evaluation reports when ``has_splits`` is False (for that error message)
    split_note: ClassVar[str] = ""
    #: options of :meth:`add_eval_args` whose data is evaluated in place of a split (``eval --split`` with one
    #: of them is refused, not silently ignored)
    eval_file_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: TaskConfig, *, seed: int = 0, rank: int = 0):
        self.cfg = cfg
        self.seed = seed
        self.rank = rank
        self.train_data: Any = None
        self.checkpoint: Any = None    # set by experiment.load_trained: the checkpoint loaded
        self.checkpoint_note = ""      # ... and a note when newer invalid ones were skipped
        self.trained_data: dict | None = None  # ... and its training data's state (what it trained on)

    @classmethod
    def without_data(cls, cfg: TaskConfig, *, seed: int = 0, rank: int = 0) -> Task:
        """This task with only the base initialiser run: no data built (some tasks take minutes). Enough for the
        many tasks whose :meth:`resolve_model_config` and :meth:`build_model` read their config alone (the study
        preflight builds every run's model on the meta device this way); a method that needs the data fails
        (AttributeError), never returns a number."""
        task = cls.__new__(cls)
        Task.__init__(task, cfg, seed=seed, rank=rank)
        return task

    # ------------------------------------------------------------------ model
    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        """The model config with task-given sizes filled in (vocabulary, classes, sequence length).

        The resolved config is what a run records, so a run can be rebuilt from its ``config.yaml``.
        Default: unchanged.
        """
        return model_cfg

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        """A freshly initialised model for ``model_cfg`` (already resolved)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ training
    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        """Trainer loss function: (scalar loss, metrics) for one batch on the training device."""
        raise NotImplementedError

    #: ``loss_items(batch) -> int``: the items :meth:`loss`'s mean averages over in ``batch`` (e.g. the blank
    #: cells of Sudoku boards), where it varies from batch to batch; the trainer then weighs micro-batches and
    #: ranks by it (:mod:`energyformer.train.accumulate`). None: every batch averages over as many items.
    loss_items: Callable[[tuple], int] | None = None

    @staticmethod
    def add_aux_losses(loss: torch.Tensor, out: Any, metrics: dict[str, float] | None = None,
                       ) -> tuple[torch.Tensor, dict[str, float]]:
        """The one place auxiliary losses join a task's loss: ``loss + Σ_k out.aux_losses[k]`` (in the
        order the blocks added them), each also reported as a metric under its name. ``out``: the
        model's :class:`~energyformer.models.output.ModelOutput`. Returns (loss, metrics)."""
        metrics = {} if metrics is None else metrics
        for name, value in (getattr(out, "aux_losses", None) or {}).items():
            loss = loss + value
            metrics[name] = value.detach()  # a tensor: the trainer reads it after the backward (no sync here)
        return loss, metrics

    def callbacks(self, model: nn.Module) -> list:
        """Trainer callbacks this task needs (annealing, projections); default none."""
        return []

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, model: nn.Module, split: str = "validation", **options: Any) -> dict[str, float]:
        """Metrics of ``model`` on ``split`` (model in eval mode, no grad; moves data itself)."""
        raise NotImplementedError

    def eval_fn(self, split: str = "validation"):
        """``eval_fn(model) -> metrics`` for the trainer's periodic evaluation."""

        def fn(model: nn.Module) -> dict[str, float]:
            return self.evaluate(model, split)

        return fn

    @classmethod
    def add_eval_args(cls, parser: argparse.ArgumentParser) -> None:
        """Task-specific options of ``energyformer eval`` (e.g. ``--text-file``); default none."""

    def eval_from_args(self, model: nn.Module, args: argparse.Namespace,
                       forward_options: dict[str, Any]) -> tuple[str, dict[str, float]]:
        """``energyformer eval``: (what was evaluated, metrics). Default: ``--split`` of the task's data."""
        return f"{self.name} {args.split} split", self.evaluate(model, args.split, **forward_options)

    def format_metrics(self, metrics: dict[str, float]) -> str:
        """One line for the CLI, e.g. ``loss 1.234, accuracy 0.91``."""
        parts = []
        for k, v in metrics.items():
            k = k.removeprefix("eval/")
            parts.append(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}")
        return ", ".join(parts)

    # ------------------------------------------------------------------ generation
    def generate(self, model: nn.Module, args: argparse.Namespace,
                 emit: Callable[[str], object] | None = None) -> str:
        """The sample as text; with ``emit``, also handed out piece by piece while it is drawn (joined, the same
        text). ``args.iterations`` / ``args.steps``: ``generate --iterations / --steps`` (None: the model's own),
        already checked against the model by the command line; a task that generates passes them to the model."""
        raise NotImplementedError(f"task {self.name!r} does not generate")

    @classmethod
    def add_generate_args(cls, parser: argparse.ArgumentParser) -> None:
        """Options of ``energyformer generate`` for tasks that generate."""
