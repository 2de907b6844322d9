"""Metric hooks and claim reducers of the ``cem-lm`` study (CEM seed 000 §4.1-4.4, Fig. 2-4; its page is
declared in ``studies/cem-lm.yaml``).

Metric hooks (run on every finished run of ``studies/cem-lm.yaml``): :func:`validation` (final validation
loss, perplexity = exp(loss), bits per byte), :func:`history` (the training loss, at most 80 block means)
and :func:`unigram` (the add-one unigram baseline's validation perplexity). Claim reducers (an arm's
``reduce: {over, fn}``): :func:`lowest` (the best of several configs), :func:`akima_loss` and
:func:`akima_log2_lr` / :func:`akima_lr` (seed §4.3, Fig. 3a: the optimum of the Akima interpolant of
loss over log2 lr); the page's LR-sweep table uses the same reducers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

#: training-loss points kept per run (block means)
HISTORY_POINTS = 80


# ----------------------------------------------------------------------------- metric hooks
def validation(run) -> dict[str, float]:
    """Metric hook: the final validation loss (nats/token), perplexity and bits per byte (left out where the
    evaluation could not count the scored tokens' bytes exactly: ``evaluate_lm`` then reports none)."""
    f = run.result.final
    return {"loss": f["eval/loss"], "ppl": f["eval/ppl"], **({"bpb": f["eval/bpb"]} if "eval/bpb" in f else {})}


def history(run) -> list[float]:
    """Metric hook: the training loss of metrics.jsonl, as at most :data:`HISTORY_POINTS` block means."""
    path = Path(run.run_dir) / "metrics.jsonl"
    hist = [rec["loss"] for rec in map(json.loads, path.read_text().splitlines())
            if rec.get("event", "train") == "train" and "loss" in rec] if path.exists() else []
    if len(hist) > HISTORY_POINTS:
        hist = [float(np.mean(c)) for c in np.array_split(np.asarray(hist), HISTORY_POINTS)]
    return hist


def unigram(run) -> float:
    """Metric hook: validation perplexity of the add-one smoothed unigram model (same tokenizer)."""
    from ..data.text import unigram_perplexity

    task = run.result.task if run.result is not None and run.result.task is not None else run.trained()[2]
    return unigram_perplexity(task.train_ids, task.windows("validation").data, task.vocab_size)


# ----------------------------------------------------------------------------- claim reducers
def lowest(labels: list[str], values: list[float]) -> float:
    """Reducer: the lowest value (the best of several configs on a loss)."""
    return min(values)


def _akima(labels: list[str], values: list[float]) -> tuple[float, float] | None:
    if len(values) < 3:
        return None
    return akima_optimum([float(x) for x in labels], values)


def akima_loss(labels: list[str], values: list[float]) -> float | None:
    """Reducer over the lr axis: the loss at the Akima-interpolated optimum (None below three rates)."""
    opt = _akima(labels, values)
    return None if opt is None else opt[1]


def akima_log2_lr(labels: list[str], values: list[float]) -> float | None:
    """Reducer over the lr axis: log2 of the Akima-interpolated optimal rate (octaves; None below three rates)."""
    opt = _akima(labels, values)
    return None if opt is None else math.log2(opt[0])


def akima_lr(labels: list[str], values: list[float]) -> float | None:
    """Reducer over the lr axis: the Akima-interpolated optimal rate (None below three rates)."""
    opt = _akima(labels, values)
    return None if opt is None else opt[0]


def akima_optimum(lrs: list[float], losses: list[float], grid: int = 400) -> tuple[float, float]:
    """Optimal LR by Akima interpolation of loss over log2(lr) (CEM seed Fig. 3a): (lr*, loss*)."""
    from scipy.interpolate import Akima1DInterpolator

    order = np.argsort(lrs)
    x = np.log2(np.asarray(lrs, dtype=float)[order])
    y = np.asarray(losses, dtype=float)[order]
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    if len(x) < 3:
        i = int(np.argmin(y))
        return float(2 ** x[i]), float(y[i])
    f = Akima1DInterpolator(x, y)
    xs = np.linspace(x[0], x[-1], grid)
    ys = f(xs)
    i = int(np.nanargmin(ys))
    return float(2 ** xs[i]), float(ys[i])
