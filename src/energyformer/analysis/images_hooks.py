"""Metric hooks and the two page hooks of the ``hyperset-images`` study (seed 002 §5.2-5.4, Tables 1-5,
Fig. 4-6; ``studies/hyperset-images.yaml``). Each hook is ``fn(run: FinishedRun) -> JSON | None`` (None: not
recorded for this run); accuracies are in %.

* :func:`classify` — validation and test accuracy, test loss, per-class accuracy and the test confusion
  matrix, training images/s (median of the logged rates), the last training loss (classification runs);
* :func:`depth` — validation accuracy at n = 0.5, 1, 1.5, 2 × L iterations on :data:`DEPTH_EXAMPLES` images
  (test-time depth; runs of :data:`CURVES_FOR`);
* :func:`trajectory` — Fig. 5-6 on :data:`TRAJECTORY_IMAGES` validation images for t = 0 … 2L
  (:func:`energyformer.analysis.hyperset.trajectory`: E_ATTN, E_FF, per-subspace effective rank Eq. 17 and
  average angle Eq. 18, full-space effective rank) and the statistics its claims compare (:func:`summarise`);
* :func:`mim` — the validation metrics of a masked-image-modelling run (Table 3's stand-in, §5.3);
* :func:`highest` — a claim reducer (the best of several configs); :func:`confusion` (figure) and
  :func:`per_class` (section) — the confusion matrices and per-class tables of :data:`CURVES_FOR`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from statistics import fmean
from typing import Any

import torch

#: configs (labels of the study's ``model`` axis) whose runs record a depth curve and a trajectory
CURVES_FOR = ("hyperset", "transformer")
#: validation images of a depth curve; validation images of a trajectory
DEPTH_EXAMPLES, TRAJECTORY_IMAGES = 2000, 256


def _classifier(run) -> bool:
    return run.config.task.kind == "image_classification"


def _train_rate(run_dir: Path) -> float:
    """Median logged training images/s (excludes evaluation and checkpointing)."""
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rates = [r["tokens_per_s"] for r in rows if r.get("event", "train") == "train" and "tokens_per_s" in r]
    return float(statistics.median(rates)) if rates else float("nan")


@torch.no_grad()
def classify(run) -> dict[str, Any] | None:
    """Metric hook: accuracies (%) on the validation and the official test split, the test confusion matrix."""
    if not _classifier(run):
        return None
    _, model, task = run.trained()
    val = task.evaluate(model, "validation")
    test = task.evaluate(model, "test", per_class=True)
    return {"val_accuracy": 100 * val["accuracy"], "test_accuracy": 100 * test["accuracy"], "test_loss": test["loss"],
            "class_acc": test["class_acc"], "confusion": test["confusion"], "classes": list(task.classes),
            "train_examples": len(task.data.train), "train_images_per_s": _train_rate(run.run_dir),
            "final_train_loss": run.result.loss_history[-1] if run.result and run.result.loss_history else None}


@torch.no_grad()
def depth(run) -> dict[str, Any] | None:
    """Metric hook: validation accuracy (%) at other iteration counts than the trained L (each count once)."""
    if not _classifier(run) or run.cell.get("model") not in CURVES_FOR:
        return None
    cfg, model, task = run.trained()
    L, old = cfg.model.iterations, task.cfg
    ns = sorted({max(1, int(round(f * L))) for f in (0.5, 1.0, 1.5, 2.0)})
    task.cfg = old.model_copy(update={"eval_examples": DEPTH_EXAMPLES})
    try:
        acc = [100 * float(task.evaluate(model, "validation", iterations=n)["accuracy"]) for n in ns]
    finally:
        task.cfg = old
    return {"iterations": ns, "accuracy": acc, "split": "validation", "examples": DEPTH_EXAMPLES}


def summarise(tr: dict[str, list], L: int, images: int) -> dict[str, Any]:
    """A trajectory to 2L (:func:`~energyformer.analysis.hyperset.trajectory`) as the study records it:
    ``curve`` (columns over t: energies, the mean over subspaces of rank and angle, full rank),
    ``per_subspace`` (rank and angle per head) and the statistics at the trained L:
    ``d_energy_attn`` / ``d_energy_ff`` / ``d_energy_total`` E(L) − E(0) (Fig. 5), ``max_rise`` the largest
    one-step change of E_ATTN + E_FF for t = 1 … L (< 0: it falls at every step), ``rises`` / ``rise_steps``
    the steps that raise it, ``d_eff_rank`` / ``d_angle`` / ``d_full_rank`` the change from t = 0 to L
    (Fig. 6), and the values they come from. Energy statistics are None for a layer without energies."""
    T = len(tr["eff_rank"]) - 1
    if not 1 <= L <= T:
        raise ValueError(f"trained = {L}: the trajectory covers t = 0 … {T}")
    rank, angle = [fmean(v) for v in tr["eff_rank"]], [fmean(v) for v in tr["angle"]]
    e = tr["e_total"]
    out: dict[str, Any] = {
        "images": images, "iterations": T, "trained": L,
        "curve": {"t": list(range(T + 1)), "e_attn": tr["e_attn"], "e_ff": tr["e_ff"], "e_total": e,
                  "eff_rank": rank, "angle": angle, "full_rank": tr["full_rank"]},
        "per_subspace": {"eff_rank": tr["eff_rank"], "angle": tr["angle"]},
        "d_energy_attn": None, "d_energy_ff": None, "d_energy_total": None, "max_rise": None, "rises": None,
        "rise_steps": None, "e_total_at": None,
        "d_eff_rank": rank[L] - rank[0], "d_angle": angle[L] - angle[0],
        "d_full_rank": tr["full_rank"][L] - tr["full_rank"][0],
        "eff_rank_0": rank[0], "eff_rank_L": rank[L], "angle_0": angle[0], "angle_L": angle[L],
        "full_rank_0": tr["full_rank"][0], "full_rank_L": tr["full_rank"][L]}
    if e[0] is not None:
        steps = [e[t] - e[t - 1] for t in range(1, L + 1)]
        out.update({"d_energy_attn": tr["e_attn"][L] - tr["e_attn"][0], "d_energy_ff": tr["e_ff"][L] - tr["e_ff"][0],
                    "d_energy_total": e[L] - e[0], "max_rise": max(steps), "rises": sum(s > 0 for s in steps),
                    "rise_steps": [t for t in range(1, L + 1) if e[t] > e[t - 1]],
                    "e_total_at": [e[0], e[L // 2], e[L], e[min(2 * L, T)]]})
    return out


@torch.no_grad()
def trajectory(run) -> dict[str, Any] | None:
    """Metric hook: the trajectory to 2L on the first :data:`TRAJECTORY_IMAGES` validation images (:func:`summarise`)."""
    from .hyperset import trajectory as traj

    if not _classifier(run) or run.cell.get("model") not in CURVES_FOR:
        return None
    cfg, model, task = run.trained()
    L = cfg.model.iterations
    x, _ = next(iter(task.data.eval_batches("validation", TRAJECTORY_IMAGES)))   # (B, C, H, W)
    return summarise(traj(model, x.to(next(model.parameters()).device), 2 * L), L, int(x.shape[0]))


@torch.no_grad()
def mim(run) -> dict[str, Any] | None:
    """Metric hook (masked image modelling): ``task.evaluate`` on the validation split — masked CE and
    accuracy, decoded accuracy, PSNR, SSIM, the unigram floor and the tokeniser ceiling of the same images."""
    if run.config.task.kind != "masked_image_modelling":
        return None
    _, model, task = run.trained()
    return {**task.evaluate(model, "validation"), "split": "validation"}


def highest(labels: list[str], values: list[float]) -> float:
    """Claim reducer: the best of the selected configs (per seed)."""
    return max(values)


def _seed0(ctx, dataset: str, model: str) -> dict | None:
    recs = [r for r in ctx.select({"dataset": dataset, "model": model}) if (r.get("metrics", {}).get("classify") or {})
            .get("confusion") is not None]
    return min(recs, key=lambda r: r["seed"]) if recs else None


def confusion(ctx, path: Path) -> Path | None:
    """Figure hook: the row-normalised test confusion matrices of :data:`CURVES_FOR` (first seed), a panel
    per (data set, model); None when no run recorded one."""
    from .classification import draw_confusion
    from .figures import save_figure

    cells = [(d, m, r) for d in ctx.labels("dataset") for m in CURVES_FOR if (r := _seed0(ctx, d, m))]
    if not cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = len(CURVES_FOR)
    nrow = -(-len(cells) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 5.6 * nrow), squeeze=False)
    for ax in axes.flat[len(cells):]:
        ax.axis("off")
    for ax, (d, m, r) in zip(axes.flat, cells):
        c = r["metrics"]["classify"]
        draw_confusion(ax, torch.tensor(c["confusion"]), c["classes"],
                       f"{m} on {d} test: {c['test_accuracy']:.2f}% (seed {r['seed']})")
    fig.tight_layout()
    return save_figure(fig, path, dpi=90)


def per_class(ctx) -> str:
    """Section hook: per-class test accuracy and the most common confusion of :data:`CURVES_FOR` (first seed)."""
    from .classification import per_class_markdown

    parts = []
    for d in ctx.labels("dataset"):
        for m in CURVES_FOR:
            if (r := _seed0(ctx, d, m)) is not None:
                c = r["metrics"]["classify"]
                parts.append(f"### Per-class test accuracy: {m} on {d} (seed {r['seed']})\n\n"
                             + per_class_markdown(torch.tensor(c["confusion"]), c["classes"]) + "\n")
    return "\n".join(parts)
