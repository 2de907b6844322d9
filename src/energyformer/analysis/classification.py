"""Classification metrics and plots: predictions, confusion matrix, per-class accuracy, a PNG.

* :func:`predict` — the model's predictions and the summed cross-entropy over batches of images.
* :func:`confusion_matrix` — ``cm[t, p]`` = examples of true class t predicted as p.
* :func:`per_class_accuracy` — the diagonal over the row sums (NaN for a class with no examples).
* :func:`draw_confusion` / :func:`plot_confusion` — the row-normalised matrix as a heat map with counts
  (on a matplotlib axis / as a PNG).
* :func:`per_class_markdown` — a markdown table of per-class accuracy and the most common confusion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from .figures import save_figure


@torch.no_grad()
def predict(model: nn.Module, batches: Iterable[tuple[Tensor, Tensor]], device: torch.device | None = None,
            **forward: Any) -> tuple[Tensor, Tensor, float]:
    """(predictions, labels, summed cross-entropy) over ``batches`` of (images, labels).

    ``forward`` goes to the model call (``iterations=``, ``steps=``). Predictions and labels are CPU
    int64 tensors in batch order.
    """
    device = device or next(model.parameters()).device
    preds, labels, loss = [], [], 0.0
    for x, y in batches:
        logits = model(x.to(device), **forward).logits.float()
        y = y.to(device)
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        preds.append(logits.argmax(-1).cpu())
        labels.append(y.cpu())
    if not preds:
        raise ValueError("predict: no batches")
    return torch.cat(preds), torch.cat(labels), loss


def confusion_matrix(preds: Tensor, labels: Tensor, n_classes: int) -> Tensor:
    """(n_classes, n_classes) int64 counts: row = true class, column = predicted class."""
    if preds.shape != labels.shape:
        raise ValueError(f"preds {tuple(preds.shape)} and labels {tuple(labels.shape)} differ in shape")
    for name, t in (("preds", preds), ("labels", labels)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n_classes):
            raise ValueError(f"{name} hold classes in [{int(t.min())}, {int(t.max())}]; n_classes = {n_classes}")
    idx = labels.long() * n_classes + preds.long()
    return torch.bincount(idx, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def per_class_accuracy(cm: Tensor) -> list[float]:
    """Recall of each class: cm[c, c] / Σ_p cm[c, p] (NaN where a class has no examples)."""
    rows = cm.sum(1)
    return [float(cm[c, c]) / float(rows[c]) if rows[c] else math.nan for c in range(cm.shape[0])]


def accuracy(cm: Tensor) -> float:
    """Overall accuracy from a confusion matrix."""
    total = int(cm.sum())
    return float(cm.diagonal().sum()) / total if total else math.nan


def per_class_markdown(cm: Tensor, classes: Sequence[str]) -> str:
    """Markdown table: class, examples, accuracy, the class it is most often mistaken for."""
    acc = per_class_accuracy(cm)
    lines = ["| class | examples | accuracy (%) | most often predicted instead |", "|---|---:|---:|---|"]
    for c, name in enumerate(classes):
        off = cm[c].clone()
        off[c] = 0
        worst = int(off.argmax()) if int(off.sum()) else None
        other = f"{classes[worst]} ({int(off[worst])})" if worst is not None else "-"
        a = f"{100 * acc[c]:.1f}" if not math.isnan(acc[c]) else "-"
        lines.append(f"| {name} | {int(cm[c].sum())} | {a} | {other} |")
    return "\n".join(lines)


def draw_confusion(ax, cm: Tensor, classes: Sequence[str], title: str = "") -> Any:
    """Draw the row-normalised confusion matrix (colour) with raw counts (text) on ``ax``; returns the image."""
    n = cm.shape[0]
    rows = cm.sum(1, keepdim=True).clamp_min(1)
    frac = (cm.double() / rows).numpy()
    im = ax.imshow(frac, cmap="Blues", vmin=0.0, vmax=1.0)
    if n <= 20:
        for t in range(n):
            for p in range(n):
                if cm[t, p]:
                    ax.text(p, t, str(int(cm[t, p])), ha="center", va="center", fontsize=7,
                            color="white" if frac[t, p] > 0.5 else "black")
        ax.set_xticks(range(n), [str(c) for c in classes], rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(n), [str(c) for c in classes], fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(title or f"confusion matrix (accuracy {100 * accuracy(cm):.2f}%)")
    return im


def plot_confusion(cm: Tensor, classes: Sequence[str], path: str | Path, title: str = "") -> Path:
    """Save the row-normalised confusion matrix (colour) with raw counts (text) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.45 * cm.shape[0] + 2.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    im = draw_confusion(ax, cm, classes, title)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="fraction of the true class")
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
