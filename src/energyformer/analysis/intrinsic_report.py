"""Hooks of the ``intrinsic-lm`` study (seed 001 §4, Fig. 1; its page is declared in ``studies/intrinsic-lm.yaml``).

The seed's claim is about **convergence speed** (Fig. 1 gives curves, no number), so every run records its
validation-loss history and the loss at 10 / 25 / 50 / 100 % of the budget (:func:`val_loss`) and the
depth traces of its trained model (:func:`depth_trace`). What the page cannot say as a table or a generic
plot stays here: :func:`convergence` (tokens to reach MHA's final loss, and whether the spread of the
variants exceeds the seed noise) and :func:`depth_figure` (one segment per layer: each layer has its own
energy).
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean

import numpy as np

#: budget fractions at which losses are recorded (seed: convergence speed)
POINTS = (0.10, 0.25, 0.50, 1.00)
#: seeds a variant needs before its spread counts as a noise estimate
MIN_SEEDS = 2


def eval_history(run_dir: Path) -> list[tuple[int, float]]:
    """(step, validation loss) of every evaluation in a run's metrics.jsonl."""
    from ..train.metrics import METRICS_FILE, read_events

    out = []
    for rec in read_events(Path(run_dir) / METRICS_FILE):
        loss = rec.get("eval/loss", rec.get("loss")) if rec.get("event") == "eval" else None
        if loss is not None:
            out.append((int(rec["step"]), float(loss)))
    return out


def loss_at(hist: list[tuple[int, float]], step: float) -> float:
    """Validation loss at ``step``, linearly interpolated between evaluations (NaN before the first)."""
    steps, losses = np.array([s for s, _ in hist], float), np.array([v for _, v in hist], float)
    if not len(steps) or step < steps[0] - 1e-9:
        return float("nan")
    return float(np.interp(step, steps, losses))


def steps_to_reach(hist: list[tuple[int, float]], target: float) -> float:
    """First (interpolated) step at which the validation loss is ≤ target; inf if never."""
    prev = None
    for s, v in hist:
        if v <= target:
            if prev is None or prev[1] == v:
                return float(s)
            s0, v0 = prev
            return s0 + (v0 - target) / (v0 - v) * (s - s0)
        prev = (s, v)
    return float("inf")


def history_points(hist: list[tuple[int, float]], total_steps: int) -> dict:
    """The ``val_loss`` record of one run: its [step, loss] history and the loss at each budget point."""
    out: dict = {"history": [[int(s), float(v)] for s, v in hist]}
    for p in POINTS:   # None (not NaN, which is not JSON) before the first evaluation
        v = loss_at(hist, p * total_steps)
        out[f"at_{int(p * 100)}"] = v if math.isfinite(v) else None
    out["final"] = out.pop("at_100")
    return out


def val_loss(run) -> dict:
    """Metric hook: validation-loss history and the loss at 10/25/50/100 % of the budget."""
    return history_points(eval_history(run.run_dir), run.config.train.steps)


def depth_trace(run) -> dict | None:
    """Metric hook: :func:`intrinsic_traces.depth_traces` of the trained model on 4 validation sequences
    (None for an attention that is not an intrinsic kind)."""
    from .intrinsic_traces import depth_traces

    _, model, task = run.trained()
    x, _ = next(iter(task.windows("validation")))
    try:
        return depth_traces(model, x[:4].to(next(model.parameters()).device))
    except TypeError:
        return None


# ----------------------------------------------------------------------------- page hooks
def _fmt_tokens(t: float) -> str:
    return "not reached" if not math.isfinite(t) else f"{t / 1e6:.2f}M" if t >= 1e6 else f"{t / 1e3:.0f}K"


def scale_verdict(finals: dict[str, list[float]]) -> str:
    """One sentence: do the variants' final losses ({variant: per seed}) differ by more than the seed noise?

    Spread = max − min over variants of the mean final loss; noise = the largest final-loss range over the
    seeds of any variant run with ≥ MIN_SEEDS seeds. Spread ≤ 2 × noise (or no noise estimate at all)
    means the run cannot tell the variants apart — said plainly rather than read as a result.
    """
    means = {n: fmean(x) for n, x in finals.items()}
    spread = max(means.values()) - min(means.values())
    multi = {n: max(x) - min(x) for n, x in finals.items() if len(x) >= MIN_SEEDS}
    lo, hi = min(means, key=means.get), max(means, key=means.get)
    head = (f"The mean final losses of the {len(finals)} variants span {spread:.3f} nats "
            f"({lo} {means[lo]:.3f} to {hi} {means[hi]:.3f})")
    if not multi:
        return (head + "; no variant was run with 2 seeds, so there is no noise estimate: this run cannot tell "
                "the variants apart.")
    worst = max(multi, key=multi.get)
    noise = (f"the largest seed-to-seed range is {multi[worst]:.3f} nats ({worst}, {len(finals[worst])} seeds; "
             f"{len(multi)} of {len(finals)} variants have ≥ {MIN_SEEDS} seeds)")
    if spread <= 2 * multi[worst]:
        return f"{head}, within twice the seed noise: {noise}. At this scale the run cannot tell the variants apart."
    return f"{head}, more than twice the seed noise: {noise}. The run separates at least the extreme variants."


def convergence(ctx) -> str:
    """Page section: per corpus, the tokens each run needs to reach MHA's final validation loss (mean over
    its seeds; interpolated between evaluations) and :func:`scale_verdict` of the final losses."""
    lines = ["## Convergence: tokens to reach MHA's final loss", "",
             "Target = MHA's final validation loss on the corpus (mean over seeds), reached at the first "
             "(interpolated) evaluation at or below it; one entry per seed.", "",
             "| corpus | target | variant | tokens to reach the target |", "|---|---:|---|---|"]
    verdicts = []
    for corpus in ctx.labels("corpus"):
        finals: dict[str, list[float]] = {}
        base = ctx.select({"corpus": corpus, "variant": "mha"})
        target = fmean(r["metrics"]["val_loss"]["final"] for r in base) if base else math.nan
        for v in ctx.labels("variant", {"corpus": corpus}):
            rs = sorted(ctx.select({"corpus": corpus, "variant": v}), key=lambda r: r["seed"])
            finals[v] = [r["metrics"]["val_loss"]["final"] for r in rs]
            t = [steps_to_reach(r["metrics"]["val_loss"]["history"], target)
                 * r["resolved"]["task"]["batch_size"] * r["resolved"]["task"]["seq_len"] for r in rs]
            lines.append(f"| {corpus} | {target:.3f} | {v} | {', '.join(map(_fmt_tokens, t))} |")
        verdicts.append(f"* **{corpus}:** {scale_verdict(finals)}")
    return "\n".join(lines + ["", "**Can this run tell the variants apart?**", "", *verdicts]) + "\n"


def depth_figure(ctx, path: Path) -> Path | None:
    """Page figure: the records' depth traces (seed 0, first corpus; MHA and the momentum variants), drawn
    by :func:`intrinsic_traces.plot_depth_traces`; records without them keep the committed figure."""
    from .intrinsic_traces import plot_depth_traces

    seeds, corpora = ctx.labels("seed"), ctx.labels("corpus")
    traces = {r["cell"]["variant"]: r["metrics"]["depth_trace"]
              for r in ctx.select({"seed": seeds[0], "corpus": corpora[0], "variant": ["mha", "momen_mha", "nag_mha"]})
              if r["metrics"].get("depth_trace")} if seeds and corpora else {}
    if traces:
        return plot_depth_traces(traces, path)
    return path if path.exists() else None
