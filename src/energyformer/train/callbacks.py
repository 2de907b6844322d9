"""Callbacks run by the trainer after each optimiser step: constraints, annealing, anything stateful.

Protocol (every method optional; subclass :class:`Callback` or just write the methods)::

    on_train_start(trainer)            after setup and resume, before the first step of this fit()
    on_step_end(trainer, step)         after optimiser step ``step`` (1-based, == trainer.step)
                                       -> None, or a dict of numbers logged with the next train event
                                       (names other than the trainer's own: loss, lr, train/..., ...)
    state_dict() -> dict               saved in every checkpoint (tensors and plain values only)
    load_state_dict(state)             called on resume, before on_train_start

One optimiser step is: ``grad_accum`` forward/backward passes -> gradient clipping ->
``optimizer.step()`` -> schedule step -> ``trainer.step += 1`` -> ``trainer.step_metrics`` set ->
every callback's ``on_step_end`` in list order -> logging, evaluation and checkpoint of that step.
So a checkpoint of step ``s`` holds the weights *after* the callbacks of step ``s`` and their state,
and resuming is exact. ``trainer.step_metrics`` holds the step's ``loss`` (mean over micro-batches,
all-reduced under DDP), ``lr``, ``grad_norm`` (the global gradient norm before clipping, every step) and the
task's ``train/<name>`` values.
Callbacks run on every DDP rank (the replicas are identical, so must be their effect); the state
saved is rank 0's. ``trainer.model`` is the plain module (no DDP / compile wrapper).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn


class Callback:
    """Base class with no-op hooks; ``name`` keys the saved state (default: the class name)."""

    name: str | None = None

    def on_train_start(self, trainer: Any) -> None:
        """Called once per ``fit()``, after resume (``trainer.step`` is the step resumed from)."""

    def on_step_end(self, trainer: Any, step: int) -> Mapping[str, float] | None:
        """Called after optimiser step ``step``; may return metrics to log."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


# keys of the trainer's own train events; callback metrics may not overwrite them
RESERVED_METRICS = ("event", "step", "lr", "loss", "tokens_per_s", "tokens", "elapsed_s", "grad_norm")


class CallbackList:
    """Runs callbacks in order and saves/restores their state keyed by name (``Name``, ``Name#2``)."""

    def __init__(self, callbacks: Iterable[Any] | None) -> None:
        self.callbacks = list(callbacks or [])
        self.names: list[str] = []
        for cb in self.callbacks:
            if not any(callable(getattr(cb, h, None)) for h in ("on_step_end", "on_train_start")):
                raise TypeError(f"callback {cb!r} has neither on_step_end(trainer, step) nor "
                                "on_train_start(trainer)")
            base = getattr(cb, "name", None) or type(cb).__name__
            name, i = base, 2
            while name in self.names:
                name, i = f"{base}#{i}", i + 1
            self.names.append(name)

    def __len__(self) -> int:
        return len(self.callbacks)

    def on_train_start(self, trainer: Any) -> None:
        for cb in self.callbacks:
            hook = getattr(cb, "on_train_start", None)
            if callable(hook):
                hook(trainer)

    def on_step_end(self, trainer: Any, step: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for cb, name in zip(self.callbacks, self.names):
            hook = getattr(cb, "on_step_end", None)
            if callable(hook):
                out = hook(trainer, step)
                if out is not None:
                    if not isinstance(out, Mapping):
                        raise TypeError(f"callback {name}.on_step_end returned {type(out).__name__}; "
                                        "expected None or a dict of metrics")
                    for k, v in out.items():
                        if k in RESERVED_METRICS or str(k).startswith(("train/", "eval/")):
                            raise ValueError(f"callback {name} returned metric {k!r}, a name the "
                                             "trainer logs itself; use another (e.g. 'cb/...')")
                        metrics[str(k)] = float(v)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {name: cb.state_dict() for cb, name in zip(self.callbacks, self.names)
                if callable(getattr(cb, "state_dict", None))}

    def load_state_dict(self, states: Mapping[str, Any] | None) -> None:
        states = dict(states or {})
        for cb, name in zip(self.callbacks, self.names):
            if not callable(getattr(cb, "load_state_dict", None)):
                continue
            if name in states:
                cb.load_state_dict(states.pop(name))
            elif callable(getattr(cb, "state_dict", None)) and cb.state_dict():
                warnings.warn(f"callback {name}: the checkpoint holds no state for it; it starts "
                              "fresh", stacklevel=3)
        if states:
            warnings.warn(f"the checkpoint holds state of callbacks this run does not have: "
                          f"{', '.join(sorted(states))}; ignored", stacklevel=3)


# ----------------------------------------------------------------------------------------------


class ProjectionCallback(Callback):
    """Keep a constraint satisfied: after every ``every``-th step, project the parameters under no_grad.

    ``fn(model)`` does the projection (e.g. renormalise rows onto the unit sphere,
    ``w.div_(w.norm(dim=-1, keepdim=True))``); without ``fn`` every module of the model that has a
    ``project_()`` method is called (it is an error if none has). With ``at_start`` the model is also
    projected before the first step of a fresh run (never on resume: the weights already are).
    """

    def __init__(self, fn: Callable[[nn.Module], None] | None = None, *, every: int = 1,
                 at_start: bool = True, name: str | None = None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError(f"ProjectionCallback: fn must be callable(model), got {fn!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"ProjectionCallback: every = {every!r}: must be an integer >= 1")
        self.fn, self.every, self.at_start = fn, every, at_start
        self.name = name

    def _modules(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if callable(getattr(m, "project_", None))]

    def project(self, model: nn.Module) -> None:
        with torch.no_grad():
            if self.fn is not None:
                self.fn(model)
            else:
                for m in self._modules(model):
                    m.project_()

    def on_train_start(self, trainer: Any) -> None:
        if self.fn is None and not self._modules(trainer.model):
            raise ValueError(f"ProjectionCallback: no module of {type(trainer.model).__name__} has a "
                             "project_() method, and no fn was given")
        if self.at_start and trainer.step == 0:
            self.project(trainer.model)

    def on_step_end(self, trainer: Any, step: int) -> None:
        if step % self.every == 0:
            self.project(trainer.model)


# ----------------------------------------------------------------------------------------------

Shape = Literal["linear", "cosine"]


def anneal_value(t: int, start: float, end: float, steps: int, shape: Shape = "linear",
                 begin: int = 0) -> float:
    """Value after ``t`` completed optimiser steps: ``start`` until ``begin``, ``end`` from ``begin + steps``.

    With ``p = (t - begin) / steps`` in [0, 1]: linear ``(1 - p) * start + p * end``; cosine
    ``end + (start - end) * (1 + cos(pi * p)) / 2``. Both give exactly ``end`` at ``p = 1``.
    """
    if t >= begin + steps:
        return float(end)
    p = min(1.0, max(0.0, (t - begin) / steps))
    if shape == "linear":
        return (1.0 - p) * start + p * end
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * p))


def _resolve(root: Any, parts: Sequence[str], done: str) -> list[Any]:
    """Objects reached from ``root`` along ``parts`` (``*`` = every child module / list item)."""
    if not parts:
        return [root]
    head, rest = parts[0], parts[1:]
    here = f"{done}.{head}" if done else head
    if head == "*":
        if isinstance(root, nn.Module):
            children = list(root.children())
        elif isinstance(root, (list, tuple)):
            children = list(root)
        else:
            raise ValueError(f"AnnealCallback: '*' at {here!r} needs a module or a list, "
                             f"found {type(root).__name__}")
        return [obj for child in children for obj in _resolve(child, rest, here)]
    if not hasattr(root, head):
        raise ValueError(f"AnnealCallback: {type(root).__name__} at {done or '<target>'!r} has no "
                         f"attribute {head!r}")
    return _resolve(getattr(root, head), rest, here)


class AnnealCallback(Callback):
    """Anneal a hyper-parameter from ``start`` to ``end`` over ``steps`` optimiser steps.

    After step ``t`` the attribute is set to :func:`anneal_value` ``(t, ...)`` (so step ``t + 1``
    uses it); at ``on_train_start`` it is set for the current step, so a fresh run starts at
    ``start`` and a resumed run at the value it had. ``name`` is a dotted attribute path, ``*``
    matching every child module (``"blocks.*.solver.gamma"``), looked up on ``target``: the model
    when None, an object (a module, a config), a list of objects, or ``callable(model)`` returning
    one or a list. A tensor attribute (a buffer) is filled in place; anything else is set with
    ``setattr`` (a config with validation checks the value). The value is logged as
    ``anneal/<label>`` (``label`` defaults to ``name``).
    """

    def __init__(self, name: str, start: float, end: float, steps: int, *, target: Any = None,
                 shape: Shape = "linear", begin: int = 0, label: str | None = None) -> None:
        if not isinstance(name, str) or not name or any(not p for p in name.split(".")):
            raise ValueError(f"AnnealCallback: name = {name!r}: must be a dotted attribute path")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"AnnealCallback: steps = {steps!r}: must be an integer >= 1")
        if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0:
            raise ValueError(f"AnnealCallback: begin = {begin!r}: must be an integer >= 0")
        if shape not in ("linear", "cosine"):
            raise ValueError(f"AnnealCallback: shape = {shape!r}: allowed values are 'linear', 'cosine'")
        for key, v in (("start", start), ("end", end)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"AnnealCallback: {key} = {v!r}: must be a finite number")
        self.path, self.start, self.end, self.steps = name, float(start), float(end), steps
        self.target, self.shape, self.begin = target, shape, begin
        self.label = label or name
        self.name = f"AnnealCallback[{self.label}]"
        self._slots: list[tuple[Any, str]] = []

    def value(self, t: int) -> float:
        """The value after ``t`` completed optimiser steps."""
        return anneal_value(t, self.start, self.end, self.steps, self.shape, self.begin)

    def _roots(self, model: nn.Module) -> list[Any]:
        tgt = self.target
        if tgt is None:
            return [model]
        if callable(tgt) and not isinstance(tgt, nn.Module):
            tgt = tgt(model)
        return list(tgt) if isinstance(tgt, (list, tuple)) else [tgt]

    def bind(self, model: nn.Module) -> list[tuple[Any, str]]:
        """Resolve the (object, attribute) pairs to set; an error if there are none."""
        *path, leaf = self.path.split(".")
        slots = []
        for root in self._roots(model):
            for owner in _resolve(root, path, ""):
                if not hasattr(owner, leaf):
                    raise ValueError(f"AnnealCallback: {type(owner).__name__} has no attribute "
                                     f"{leaf!r} (path {self.path!r})")
                slots.append((owner, leaf))
        if not slots:
            raise ValueError(f"AnnealCallback: {self.path!r} matches nothing")
        self._slots = slots
        return slots

    def apply(self, value: float) -> None:
        for owner, attr in self._slots:
            cur = getattr(owner, attr)
            if isinstance(cur, torch.Tensor):
                with torch.no_grad():
                    cur.fill_(value)
            else:
                setattr(owner, attr, value)

    def on_train_start(self, trainer: Any) -> None:
        self.bind(trainer.model)
        self.apply(self.value(trainer.step))

    def on_step_end(self, trainer: Any, step: int) -> dict[str, float]:
        v = self.value(step)
        self.apply(v)
        return {f"anneal/{self.label}": v}
