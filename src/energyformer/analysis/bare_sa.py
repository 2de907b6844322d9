"""Measurements and figures for the bare self-attention study (seed 004; ``studies/bare-sa.yaml``, its hooks in
:mod:`.bare_sa_hooks`).

* :func:`per_sample_nll`: the masked-site NLL of every evaluated sequence (paired model comparisons).
* :func:`paired_difference`: mean and standard error of a per-sample difference.
* :func:`coupling_recovery`: how much of the planted Potts coupling a learned J holds ("more explainable:
  planted model", slide "pros"): the projection ``c_ij = ⟨J_ij, U⟩_F / ‖U‖²_F`` of each learned C×C block
  on the true colour matrix, its correlation with the true J_ij, and the share of ‖J‖² along U.
* :func:`step_memory`: peak resident memory of one training step, measured in a fresh subprocess running
  :mod:`energyformer.analysis.bare_sa_memory` (Linux: ``/proc/self/clear_refs`` resets the peak,
  ``VmHWM`` reads it).
* Figures (matplotlib, Agg): q sweeps, validation loss against training time, J and F heatmaps,
  denoising overlap curves and example images.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------------------------- numbers
@torch.no_grad()
def per_sample_nll(task: Any, model: torch.nn.Module, split: str = "test", scale: float | None = None,
                   **options: Any) -> torch.Tensor:
    """NLL at the masked site of each evaluated sequence of a potts_mlm ``split``, (n,) float64. ``scale``
    multiplies the logits (a bare SA model's calibrated readout over its configured one)."""
    s, idx, masked = task.eval_set(split)
    logits = task._logits(model, idx, **options)
    if scale is not None:
        logits = logits * scale
    return F.cross_entropy(logits[masked].double(), s[masked], reduction="none")


def paired_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Mean and standard error of ``a - b`` (paired samples)."""
    d = (a - b).double()
    return float(d.mean()), float(d.std() / math.sqrt(d.numel()))


def coupling_recovery(J: torch.Tensor, J_true: torch.Tensor, U: torch.Tensor) -> dict[str, float]:
    """Compare learned blocks J (L, L, C, C) (one-hot colours) with the planted ``J_true (L, L) ⊗ U (C, C)``.

    ``corr``: Pearson correlation over i ≠ j of ``c_ij = ⟨J_ij, U⟩/‖U‖²`` with ``J_true[i, j]``;
    ``u_share``: fraction of Σ‖J_ij‖² along U; ``symmetry``: correlation of c_ij with c_ji.
    """
    L = J.shape[0]
    Jc = J.detach().double()
    Uu = U.double()
    c = torch.einsum("ijab,ab->ij", Jc, Uu) / Uu.pow(2).sum()
    off = ~torch.eye(L, dtype=torch.bool)
    x, y = c[off], J_true.double()[off]
    corr = float(torch.corrcoef(torch.stack([x, y]))[0, 1])
    sym = float(torch.corrcoef(torch.stack([c[off], c.T[off]]))[0, 1])
    share = float((c[off].pow(2) * Uu.pow(2).sum()).sum() / Jc[off].pow(2).sum())
    return {"corr": corr, "u_share": share, "symmetry": sym}


def step_memory(model_cfg: dict, batch: int, n_tokens: int, *, vocab: int = 0, n_out: int = 0,
                iterations: int | None = None) -> dict[str, float]:
    """Peak extra resident memory of one training step (forward + backward + Adam) in a fresh process.

    ``step_peak_bytes``: VmHWM during the step minus VmRSS before it (weights, Adam state and the data
    are already resident); ``params``, ``param_bytes`` (float32). Transformers: a synthetic batch of
    token ids (loss: mean log-partition, same graph as a cross-entropy); bare SA: ``local_loss`` on random
    unit tokens.
    """
    spec = {"model": model_cfg, "batch": batch, "n_tokens": n_tokens, "vocab": vocab, "n_out": n_out,
            "iterations": iterations}
    src = str(Path(__file__).resolve().parents[2])  # this package's tree wins in the child, as here
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "energyformer.analysis.bare_sa_memory", json.dumps(spec)],
                         capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- figures
def plot_q_sweep(rows: dict[str, dict[str, float]], qs: list[int], bayes: float, bayes_acc: float,
                 path: Path, marginal: float | None = None) -> Path:
    """Test CE and accuracy against the number of iterations q, one line per recurrent model, flat lines
    for the others, the Bayes-optimal reference dashed."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, m in rows.items():
        key = "loss_cal_q" if f"loss_cal_q{qs[0]}" in m else "loss_q"
        if f"{key}{qs[0]}" in m:
            axes[0].plot(qs, [m[f"{key}{q}"] for q in qs], "o-", label=name)
            axes[1].plot(qs, [m[f"accuracy_q{q}"] for q in qs], "o-", label=name)
        else:
            axes[0].axhline(m["loss"], ls=":", label=name)
            axes[1].axhline(m["accuracy"], ls=":", label=name)
    axes[0].axhline(bayes, color="k", ls="--", label="Bayes-optimal")
    axes[1].axhline(bayes_acc, color="k", ls="--", label="Bayes-optimal")
    if marginal is not None:
        axes[0].axhline(marginal, color="grey", ls="-.", label="colour frequencies")
    axes[0].set(xlabel="iterations q", ylabel="test cross-entropy (nats)", title="Potts MLM: loss vs q")
    axes[1].set(xlabel="iterations q", ylabel="test accuracy", title="Potts MLM: accuracy vs q")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_time_curves(curves: dict[str, list[tuple[int, float, float]]], bayes: float, path: Path) -> Path:
    """Validation MLM loss against training wall time (evaluation time excluded), log-scaled time."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, pts in curves.items():
        if pts:
            ax.plot([max(p[1], 1e-2) for p in pts], [p[2] for p in pts], "o-", ms=3, label=name)
    ax.axhline(bayes, color="k", ls="--", label="Bayes-optimal")
    ax.set(xscale="log", xlabel="training time (s, 1 CPU thread)", ylabel="validation MLM loss (nats)",
           title="Potts MLM: loss vs training time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_couplings(J: torch.Tensor, pairs: list[tuple[int, int]], path: Path, title: str,
                   true_map: torch.Tensor | None = None) -> Path:
    """Heatmaps: ‖J_ij‖_F over (i, j) (and the planted |J_true| beside it), then a few blocks J_ij."""
    plt = _plt()
    J = J.detach().float().cpu()
    extra = 1 if true_map is not None else 0
    n = 1 + extra + len(pairs)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.2))
    im = axes[0].imshow(J.flatten(2).norm(dim=-1), cmap="viridis")
    axes[0].set_title("‖J_ij‖_F", fontsize=9)
    fig.colorbar(im, ax=axes[0], fraction=0.046)
    if true_map is not None:
        im = axes[1].imshow(true_map.abs().float().cpu(), cmap="viridis")
        axes[1].set_title("planted |J_ij| (Potts)", fontsize=9)
        fig.colorbar(im, ax=axes[1], fraction=0.046)
    for ax, (i, j) in zip(axes[1 + extra:], pairs):
        b = J[i, j]
        v = float(b.abs().max()) or 1.0
        im = ax.imshow(b, cmap="RdBu_r", vmin=-v, vmax=v)
        ax.set_title(f"J[{i},{j}]", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_matrix(M: torch.Tensor, path: Path, title: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4, 3.6))
    v = float(M.abs().max()) or 1.0
    im = ax.imshow(M.float().cpu(), cmap="RdBu_r", vmin=-v, vmax=v)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_overlaps(curves: dict[str, dict[str, list[float]]], path: Path, title: str) -> Path:
    """Overlap with the clean image (solid) and with the nearest training image (dashed) and the decoded
    MSE against dynamics steps, one colour per setting."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for k, (name, c) in enumerate(curves.items()):
        t = list(range(len(c["overlap"])))
        col = f"C{k}"
        axes[0].plot(t, c["overlap"], "-", color=col, label=f"{name}: clean")
        axes[0].plot(t, c["nearest"], "--", color=col, label=f"{name}: nearest train")
        axes[1].plot(t, c["mse"], "-", color=col, label=name)
    axes[0].set(xlabel="step t", ylabel="overlap q(t)", title=title)
    axes[1].set(xlabel="step t", ylabel="decoded-pixel MSE ([0,1] scale)", title="reconstruction error")
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_denoise_examples(curves: dict[str, Any], steps: list[int], path: Path, title: str) -> Path:
    """Rows: images; columns: clean, corrupted, decoded state at the given steps."""
    plt = _plt()
    clean, noisy, dec = curves["clean"], curves["noisy"], curves["decoded"]
    n = min(4, clean.shape[0])
    cols = 2 + len(steps)
    fig, axes = plt.subplots(n, cols, figsize=(1.6 * cols, 1.6 * n))

    def show(ax, img):
        img = img.float() / 255.0
        ax.imshow(img[0] if img.shape[0] == 1 else img.permute(1, 2, 0), cmap="gray", vmin=0, vmax=1)
        ax.axis("off")

    for r in range(n):
        show(axes[r, 0], clean[r])
        show(axes[r, 1], noisy[r])
        for c, t in enumerate(steps):
            show(axes[r, 2 + c], dec[t, r])
    for c, lab in enumerate(["clean", "corrupted"] + [f"t = {t}" for t in steps]):
        axes[0, c].set_title(lab, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub markdown table; floats with 4 significant digits."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if not math.isfinite(v) else f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)
