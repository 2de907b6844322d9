"""Metric sinks: ``metrics.jsonl`` (one JSON object per event) and TensorBoard (``out_dir/tb``).

Each line of ``metrics.jsonl`` is one event::

    {"event": "train", "step": 20, "lr": 0.0019, "loss": 2.31, "tokens_per_s": 5120.0,
     "tokens": 40960, "elapsed_s": 8.1, "grad_norm": 0.7, "train/acc": 0.4}
    {"event": "eval",  "step": 20, "elapsed_s": 8.5, "eval/loss": 2.40, "eval/acc": 0.38}

Task metrics returned by ``loss_fn`` are logged as ``train/<name>``, those returned by ``eval_fn``
as ``eval/<name>``; the same names are TensorBoard tags.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from energyformer.errors import DataError
from energyformer.utils.io import atomic_write_text

METRICS_FILE = "metrics.jsonl"


def _lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (numbered from 1 as an editor does: split on newlines only)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (a metrics file holds one JSON object per line)") from None


_NOT_JSON = object()  # what _event returns for a line that is not JSON when asked to tolerate it


def _event(path: Path, i: int, line: str, *, tolerate: bool = False) -> Any:
    """The event (a JSON object) on line ``i``; a line that is not one is a DataError naming file and line
    (with ``tolerate``, a line that is not JSON at all gives ``_NOT_JSON`` instead)."""
    try:
        ev = json.loads(line)
    except json.JSONDecodeError as err:
        if tolerate:
            return _NOT_JSON
        raise DataError(f"{path}:{i}: not a JSON line ({err.msg})") from None
    if not isinstance(ev, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(ev), "a number")
        raise DataError(f"{path}:{i}: the line is {kind} ({line.strip()[:40]}), not an event: each line must be "
                        f'a JSON object such as {{"event": "train", "step": 10}}')
    return ev


def read_events(path: Path, *, skip_bad: bool = False) -> list[dict]:
    """The events of a ``metrics.jsonl`` file in order (blank lines skipped). A line that is not a JSON
    object is a DataError naming file and line, or with ``skip_bad`` skipped (e.g. the half-written last
    line of a run that was killed)."""
    out = []
    for i, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            out.append(_event(path, i, line))
        except DataError:
            if not skip_bad:
                raise
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf
    return v


def truncate_metrics(path: Path, max_step: int) -> set[tuple[str, int]]:
    """Drop events with ``step > max_step`` (written after the checkpoint a run resumes from); returns the
    ``(event, step)`` of the events kept (a resumed trainer redoes an evaluation its checkpoint's step lacks).

    Only the last line may be broken: a run killed while writing it leaves it half-written, and it is
    dropped (with a warning). Any other line that is not JSON, a line that is not a JSON object, or a
    ``step`` that is not an integer >= 0 is a DataError naming file and line, and the file is left as it is.
    """
    if not path.is_file():
        return set()
    numbered = [(i, line) for i, line in enumerate(_lines(path), 1) if line.strip()]
    kept, seen = [], set()
    for n, (i, line) in enumerate(numbered):
        last = n == len(numbered) - 1
        ev = _event(path, i, line, tolerate=last)
        if ev is _NOT_JSON:  # a half-written last line from a killed run
            warnings.warn(f"{path}:{i}: dropped a half-written last line (the run was stopped while "
                          f"writing it): {line.strip()[:60]}", stacklevel=3)
            break
        step = ev.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise DataError(f'{path}:{i}: "step" = {json.dumps(step)[:40]}: must be an integer >= 0 '
                            "(the optimiser step the event was logged at)")
        if step <= max_step:
            kept.append(line.rstrip("\r"))
            seen.add((str(ev.get("event", "train")), step))
    atomic_write_text(path, "".join(line + "\n" for line in kept))
    return seen


class MetricsLogger:
    """Writes events to ``metrics.jsonl`` and TensorBoard; a no-op when ``enabled`` is False."""

    def __init__(self, out_dir: Path, *, enabled: bool = True, tensorboard: bool = True,
                 resume_step: int | None = None) -> None:
        self.enabled = enabled
        self._file = None
        self._tb = None
        self.kept: set[tuple[str, int]] = set()  # (event, step) of the events a resumed run keeps
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / METRICS_FILE
        if resume_step is not None:
            self.kept = truncate_metrics(path, resume_step)
        self._file = open(path, "a")
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(log_dir=str(out_dir / "tb"), purge_step=purge)

    def log(self, event: dict[str, Any]) -> None:
        if not self.enabled:
            return
        rec = {k: _jsonable(v) for k, v in event.items()}
        assert self._file is not None
        self._file.write(json.dumps(rec) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = int(event["step"])
            kind = event.get("event", "train")
            for k, v in event.items():
                if k in ("step", "event") or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                tag = k if "/" in k else f"{kind}/{k}"
                self._tb.add_scalar(tag, v, step)
            self._tb.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class StepWindow:
    """The optimiser steps since the last train event: their mean loss and metrics, tokens/s.

    ``tokens_per_s`` is the throughput of the training steps only: the trainer runs checkpoint saves and
    evaluations inside :meth:`excluded`, whose time the window's clock skips (evaluations are timed on
    their own as ``eval_s``; counting them here too made each window after one read several times
    slower). ``grad_norm`` is the last step's; ``callback_metrics`` (filled by the trainer with what
    callbacks return) keep their latest values across windows.
    """

    def __init__(self) -> None:
        self.callback_metrics: dict[str, float] = {}
        self.grad_norm: float | None = None
        self._reset(time.perf_counter())

    def _reset(self, now: float) -> None:
        self.losses: list[float] = []
        self.metrics: dict[str, float] = {}
        self.tokens = 0
        self.t0 = now

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps, so the first event after a resume averages the whole window (tokens/s
        counts the steps since the resume only: their time is all it knows)."""
        return {"losses": list(self.losses), "metrics": dict(self.metrics), "grad_norm": self.grad_norm,
                "callback_metrics": dict(self.callback_metrics)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state:
            self.losses, self.metrics = list(state["losses"]), dict(state["metrics"])
            self.grad_norm, self.callback_metrics = state["grad_norm"], dict(state["callback_metrics"])

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Time spent inside this block (a save, an evaluation) is not training time: the window's clock
        skips it, so the next ``tokens_per_s`` counts the steps' own time. (``elapsed_s`` stays wall time.)"""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.t0 += time.perf_counter() - t

    def add(self, loss: float, metrics: dict[str, float], tokens: int, grad_norm: float | None) -> None:
        self.losses.append(loss)
        for k, v in metrics.items():
            self.metrics[k] = self.metrics.get(k, 0.0) + v
        self.tokens += tokens
        if grad_norm is not None:
            self.grad_norm = grad_norm

    def event(self, step: int, lr: float, tokens_total: int, elapsed_s: float) -> dict[str, Any]:
        """The ``train`` event of this window (then the window starts again)."""
        now = time.perf_counter()
        n = max(1, len(self.losses))
        event: dict[str, Any] = {
            "event": "train", "step": step, "lr": lr, "loss": sum(self.losses) / n,
            "tokens_per_s": self.tokens / max(now - self.t0, 1e-9), "tokens": tokens_total,
            "elapsed_s": elapsed_s,
        }
        if self.grad_norm is not None:
            event["grad_norm"] = self.grad_norm
        event.update({f"train/{k}": v / n for k, v in self.metrics.items()})
        event.update(self.callback_metrics)
        self._reset(now)
        return event
