"""Metric hooks of the ``hyperset-sudoku`` study (seed 002 §5.1, Fig. 3, 5, 6): Hyper-SET vs the
looped transformer on Sudoku, test-time extrapolation, energies, effective rank and average angle.

Metric hooks (``fn(run: FinishedRun) -> JSON``, run on every finished run of ``studies/hyperset-sudoku.yaml``):

* :func:`extrapolation` — board and cell accuracy (%) on the test split at L/2 … 2L iterations (Fig. 3b),
  with 95% Wilson intervals on board accuracy at L and 2L, and the gain from L to 2L;
* :func:`energy` — E_ATTN, E_FF and their sum per iteration t = 0 … 2L (Fig. 5; Hyper-SET only) and
  the largest one-step change of each over x¹ … x^L (and of the sum beyond L): negative means "falls
  at every step";
* :func:`geometry` — effective rank (Eq. 17) and average angle (Eq. 18) per subspace per iteration
  (Fig. 6) and their rise of the mean over heads from x¹ to x^L;
* :func:`training` — the validation history of metrics.jsonl (Fig. 3a), the final training loss and the
  plateau exit (the first evaluation whose validation cell accuracy exceeds 20%; chance 11.1%);
* :func:`sizes` — step-size parameters and the parameter count at the paper's width (d 768, 12 heads, 24 it.);
* :func:`data` — the givens histogram of every split.

The page is declared in ``studies/hyperset-sudoku.yaml`` (``report:``; the paper's numbers are its rows).
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import fmean

PAPER_WIDTH = {"dim": 768, "heads": 12, "iterations": 24}
TRACE_BOARDS = 100
PLATEAU_LEVEL = 0.2


# ----------------------------------------------------------------------------- numbers
def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson interval (in %) of k successes out of n."""
    if n == 0:
        return [float("nan"), float("nan")]
    p, d = k / n, 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [max(0.0, 100 * (c - h)), min(100.0, 100 * (c + h))]


def counts(L: int) -> list[int]:
    """The iteration counts of the extrapolation curve: L/2, 3L/4, L, 5L/4, 3L/2, 7L/4, 2L."""
    return sorted({max(1, L // 2), max(1, 3 * L // 4), L, 5 * L // 4, 3 * L // 2, 7 * L // 4, 2 * L})


def accuracies(curve: dict[str, dict], L: int) -> dict:
    """Board / cell accuracy (%) at L and 2L, Wilson intervals and the gains, from a curve {str(n): score}."""
    at, n = (lambda k, key: 100 * curve[str(k)][key]), int(curve[str(L)]["n"])  # noqa: E731
    out = {f"{m}_{tag}": at(k, f"{m}_accuracy") for m in ("board", "cell") for tag, k in (("L", L), ("2L", 2 * L))}
    out.update({f"board_{tag}_ci": wilson(round(curve[str(k)]["board_accuracy"] * n), n)
                for tag, k in (("L", L), ("2L", 2 * L))})
    out.update(board_gain=out["board_2L"] - out["board_L"], cell_gain=out["cell_2L"] - out["cell_L"])
    return {"L": L, "n": n, "curve": curve, **out}


def max_step(values: list[float]) -> float:
    """The largest one-step change v[t+1] − v[t] (negative: the values fall at every step)."""
    return max(b - a for a, b in zip(values, values[1:]))


def energy_summary(t: dict, L: int) -> dict:
    """The trajectory's energies with the largest step of each over x¹ … x^L (and of the sum over x^L … x^2L)."""
    return {**{k: t[k] for k in ("e_attn", "e_ff", "e_total")},
            "total_max_step_to_L": max_step(t["e_total"][1:L + 1]),
            "total_max_step_beyond_L": max_step(t["e_total"][L:]),
            "attn_max_step_to_L": max_step(t["e_attn"][1:L + 1]), "ff_max_step_to_L": max_step(t["e_ff"][1:L + 1])}


def geometry_summary(t: dict, L: int) -> dict:
    """Rank and angle per subspace per iteration with the rise of their mean over heads from x¹ to x^L."""
    rise = {k: fmean(t[k][L]) - fmean(t[k][1]) for k in ("eff_rank", "angle")}
    return {**{k: t[k] for k in ("eff_rank", "angle", "full_rank")},
            "rank_rise": rise["eff_rank"], "angle_rise": rise["angle"]}


def plateau_exit(history: list[dict], level: float = PLATEAU_LEVEL) -> tuple[int | None, int]:
    """(step, evaluation number) of the first evaluation whose validation cell accuracy exceeds ``level``;
    a run that never does: (None, the number of evaluations + 1), censored after its last one."""
    for i, e in enumerate(history, 1):
        if e.get("eval/cell_accuracy", 0.0) > level:
            return e["step"], i
    return None, len(history) + 1


# ----------------------------------------------------------------------------- metric hooks
def extrapolation(run) -> dict:
    """Metric hook: board and cell accuracy on the whole test split at every count of :func:`counts`."""
    import time

    cfg, model, task = run.trained()
    L, test, t0 = cfg.model.iterations, task.splits["test"], time.perf_counter()
    curve = {str(n): task.score(model, test, iterations=n) for n in counts(L)}
    return {**accuracies(curve, L), "seconds": time.perf_counter() - t0}


def _trajectory(run) -> tuple[dict, int] | None:
    """(trajectory, L) on the first test boards; None for a model whose attention has no subspace
    projections known to :func:`~energyformer.analysis.hyperset.has_subspaces` (ET, CRATE). Computed once
    per run (the energy and geometry hooks share it through ``run.memo``)."""
    if "trajectory" not in run.memo:
        run.memo["trajectory"] = _trace(run)
    return run.memo["trajectory"]


def _trace(run) -> tuple[dict, int] | None:
    from .hyperset import has_subspaces, trajectory

    cfg, model, task = run.trained()
    if not has_subspaces(model.layers[0]):
        return None
    L = cfg.model.iterations
    idx = task.splits["test"].puzzles[:TRACE_BOARDS].long().to(next(model.parameters()).device)
    return trajectory(model, idx, 2 * L), L


def energy(run) -> dict | None:
    """Metric hook (Hyper-SET only): energies per iteration on the first 100 test boards (Fig. 5)."""
    traced = _trajectory(run)
    return energy_summary(*traced) if traced and traced[0]["e_total"][0] is not None else None


def geometry(run) -> dict | None:
    """Metric hook: effective rank and average angle per subspace per iteration (Fig. 6; None: see
    :func:`_trajectory`)."""
    traced = _trajectory(run)
    return geometry_summary(*traced) if traced else None


def training(run) -> dict:
    """Metric hook: validation history, final training loss, boards/s and the plateau exit (Fig. 3a)."""
    from ..train.metrics import METRICS_FILE, read_events

    rows = read_events(Path(run.run_dir) / METRICS_FILE)
    evals = [{k: e[k] for k in e if k.startswith("eval/") or k == "step"} for e in rows if e.get("event") == "eval"]
    train = [e for e in rows if e.get("event") == "train"]
    step, n = plateau_exit(evals)
    return {"eval_history": evals, "final_loss": train[-1]["loss"] if train else None,
            "boards_per_s": train[-1]["tokens_per_s"] / 81 if train else None, "plateau_step": step, "plateau_evals": n}


def sizes(run) -> dict:
    """Metric hook: parameters of the step sizes and of the same model at the paper's width."""
    from ..core.stepsize import StepSize
    from ..models import MODELS
    from ..models.params import count_params

    cfg, model, _ = run.trained()
    steps = {id(p): p.numel() for m in model.modules() if isinstance(m, StepSize) for p in m.parameters()}
    wide = MODELS.build(cfg.model.model_copy(update=PAPER_WIDTH), vocab_size=10, n_out=9, causal=False)
    return {"step_size": sum(steps.values()), "paper_width": count_params(wide)["total"]}


def data(run) -> dict[str, str]:
    """Metric hook: one givens-histogram line per split."""
    return run.trained()[2].describe_data()
