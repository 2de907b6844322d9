"""Comparison table and loss-curve plot for language-model runs (``reproduce cem-lm``, ``demo``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .figures import save_figure


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def markdown_table(rows: list[dict], unigram_ppl: float | None = None) -> str:
    """One row per run: parameters by part, validation perplexity (and per seed), bits/byte, tokens/s."""
    head = ("| run | attention | MLP | embedding | total | val ppl | per seed | val bpb | tokens/s | beats unigram |\n"
            "|---|---:|---:|---:|---:|---:|---|---:|---:|:---:|")
    lines = [head]
    best = min(r["val_ppl"] for r in rows)
    for r in rows:
        p = r["params"]
        ppl = f"**{r['val_ppl']:.2f}**" if r["val_ppl"] == best else f"{r['val_ppl']:.2f}"
        beats = "—" if unigram_ppl is None else ("yes" if r["val_ppl"] < unigram_ppl else "NO")
        per_seed = ", ".join(f"{x:.2f}" for x in r.get("ppl_seeds") or [r["val_ppl"]])
        lines.append(f"| {r['name']} | {_fmt_params(p['attention'])} | {_fmt_params(p['mlp'])} | "
                     f"{_fmt_params(p['embedding'])} | {_fmt_params(p['total'])} | {ppl} | {per_seed} | "
                     f"{r.get('val_bpb', float('nan')):.3f} | {r['tokens_per_s']:.0f} | {beats} |")
    lines.append("\ntokens/s: training tokens divided by the wall-clock time of the whole run, evaluation and "
                 "checkpointing included (benchmarks/lm_throughput.py measures pure step throughput).")
    if unigram_ppl is not None:
        lines.append(f"\nUnigram baseline (add-one smoothed, same tokenizer): validation perplexity {unigram_ppl:.2f}.")
    return "\n".join(lines)


def smooth(values: list[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if window <= 1 or len(v) < window:
        return v
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def plot_loss_curves(histories: dict[str, list[float]], path: Path, title: str = "training loss",
                     total_steps: dict[str, int] | None = None) -> Path:
    """Moving-average training loss per run; x in training steps when ``total_steps`` gives each run's
    length (a history is sampled evenly over the run), else in logged points. Many curves: the legend goes
    beside the axes and line styles cycle, so no two curves look alike."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(histories) > 10
    fig, ax = plt.subplots(figsize=(9.5 if many else 7, 4.8 if many else 4.2))
    styles = ["-", "--", ":", "-."]
    for i, (name, hist) in enumerate(histories.items()):
        w = max(1, len(hist) // 50)
        y = smooth(hist, w)
        x = np.arange(len(y)) + w
        if total_steps and total_steps.get(name) and len(hist):
            x = x * total_steps[name] / len(hist)
        ax.plot(x, y, styles[(i // 10) % len(styles)], label=name)
    ax.set_xlabel("training step" if total_steps else "logged point")
    ax.set_ylabel("training loss (nats/token, moving average)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if many:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        ax.legend()
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


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


def plot_lr_sweep(sweep: dict[str, dict], path: Path, title: str = "validation loss vs learning rate") -> Path:
    """Validation loss against log2 lr per run, its Akima interpolant and the optimum (star), like
    the seed's Fig. 3a. ``sweep[name]`` has ``lrs``, ``val_loss``, ``akima_lr``, ``akima_val_loss``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.interpolate import Akima1DInterpolator

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, v in sweep.items():
        x, y = np.log2(np.asarray(v["lrs"], dtype=float)), np.asarray(v["val_loss"], dtype=float)
        ok = np.isfinite(y)
        line = ax.plot(2 ** x[ok], y[ok], "o", label=name)[0]
        if ok.sum() >= 3:
            xs = np.linspace(x[ok][0], x[ok][-1], 200)
            ax.plot(2 ** xs, Akima1DInterpolator(x[ok], y[ok])(xs), "-", color=line.get_color(), alpha=0.7)
        ax.plot([v["akima_lr"]], [v["akima_val_loss"]], "*", ms=14, color=line.get_color(), mec="k")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)

