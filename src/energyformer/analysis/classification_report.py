"""Tables and plots of the Hyper-SET images page (seed 002 §5.2).

Every number in our columns comes from a run's row in the page's ``results.json``; the paper's columns
are the values printed in the seed's Tables 1, 4 and 5 (``PAPER_TABLE*`` in
:mod:`.classification_claims`, where each claim the tables make is decided), quoted with their data set,
which is never ours (CIFAR-10/100, ImageNet-100; ours: Fashion-MNIST / MNIST at CPU scale).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .classification_claims import PAPER_TABLE1, PAPER_TABLE4, PAPER_TABLE5
from .figures import save_figure


def fmt_params(n: int | float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}"


def table1(rows: dict, dataset: str) -> str:
    """Our Table 1 analogue beside the paper's CIFAR-10/100 columns."""
    out = [f"| model | width | params | {dataset} val (%) | {dataset} test (%) | trained on | train img/s | "
           "paper width | paper params | paper CIFAR-10 (%) | paper CIFAR-100 (%) |",
           "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for key, (label, w, p, c10, c100) in PAPER_TABLE1.items():
        r = rows.get(key)
        if r is None:
            out.append(f"| {label} (`{key}`) | — | — | not run | not run | — | — | {w} | {p} | {c10:.2f} | {c100:.2f} |")
            continue
        out.append(f"| {label} (`{key}`) | {r['width']} | {fmt_params(r['params']['total'])} | "
                   f"{pct(r.get('val_accuracy'))} | {pct(r.get('test_accuracy'))} | {r.get('device', '?')} | "
                   f"{r.get('train_images_per_s', float('nan')):.0f} | {w} | {p} | {c10:.2f} | {c100:.2f} |")
    return "\n".join(out)


def table4(rows: dict, dataset: str) -> str:
    out = [f"| component | design | params | {dataset} test (%) | paper CIFAR-10 (%) | paper CIFAR-100 (%) |",
           "|---|---|---:|---:|---:|---:|"]
    for key, (comp, design, c10, c100) in PAPER_TABLE4.items():
        r = rows.get(key)
        if r is None:
            out.append(f"| {comp} | {design} (`{key}`) | — | not run | {c10:.2f} | {c100:.2f} |")
            continue
        out.append(f"| {comp} | {design} (`{key}`) | {fmt_params(r['params']['total'])} | "
                   f"{pct(r.get('test_accuracy'))} | {c10:.2f} | {c100:.2f} |")
    return "\n".join(out)


def table5(rows: dict, dataset: str) -> str:
    out = [f"| LoRA rank | params | {dataset} test (%) | paper params | paper ImageNet-100 (%) |",
           "|---:|---:|---:|---:|---:|"]
    for key, (rank, p, acc) in PAPER_TABLE5.items():
        r = rows.get(key)
        if r is None:
            out.append(f"| {rank or 'none'} (`{key}`) | — | not run | {p} | {acc:.2f} |")
            continue
        out.append(f"| {rank or 'none'} | {fmt_params(r['params']['total'])} | {pct(r.get('test_accuracy'))} | "
                   f"{p} | {acc:.2f} |")
    return "\n".join(out)


def table_tradeoff(rows: dict, dataset: str, families: dict[str, Sequence[tuple[int, int, str]]]) -> str:
    """Fig. 4 analogue: layers x iterations at depth 12, params and accuracy per family."""
    out = [f"| model | layers x iterations | params | {dataset} test (%) |", "|---|---|---:|---:|"]
    for fam, entries in families.items():
        for layers, its, key in entries:
            r = rows.get(key)
            if r is not None:
                out.append(f"| {fam} | {layers} x {its} | {fmt_params(r['params']['total'])} | "
                           f"{pct(r.get('test_accuracy'))} |")
    return "\n".join(out)


def plot_curves(curves: dict[str, dict[int, float]], path: str | Path, *, xlabel: str, ylabel: str,
                title: str, vline: int | None = None) -> Path:
    """One line per name: y over x (e.g. accuracy over test-time iterations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    for name, c in curves.items():
        xs = sorted(c)
        ax.plot(xs, [c[x] for x in xs], marker="o", label=name)
    if vline is not None:
        ax.axvline(vline, color="grey", ls="--", lw=1, label=f"trained with {vline}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
