"""Page of the ``cem-lm`` study (CEM seed 000 §4.1-4.4, Fig. 2-4): language models at CPU scale.

Metric hooks (run on every finished run of ``studies/cem-lm.yaml``): :func:`validation` (final validation
loss, perplexity = exp(loss), bits per byte), :func:`history` (the training loss, at most 80 block means)
and :func:`unigram` (the add-one unigram baseline's validation perplexity). Claim reducers (an arm's
``reduce: {over, fn}``): :func:`lowest` (the best of several configs), :func:`akima_loss` and
:func:`akima_log2_lr` (seed Fig. 3a: the optimum of the Akima interpolant of loss over log2 lr).
:func:`render` writes the scale page (table, loss curves, claims, LR sweep, read-out and step-size
probes) from the records alone; ``demo`` uses :func:`markdown_table` and :func:`plot_loss_curves`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from statistics import fmean

import numpy as np

from .figures import save_figure

#: training-loss points kept per run (block means)
HISTORY_POINTS = 80
#: step-size probes: (probe, T=2 with η = 1, T=1)
STEP_PROBES = [("cem_attn_t2_eta0.5", "cem_attn_t2_diag", "cem_attn_t1"),
               ("cem_mlp_t2_eta0.5", "cem_mlp_t2_diag", "cem_mlp_t1")]


# ----------------------------------------------------------------------------- metric hooks
def validation(run) -> dict[str, float]:
    """Metric hook: the final validation loss (nats/token), perplexity and bits per byte."""
    f = run.result.final
    return {"loss": f["eval/loss"], "ppl": f["eval/ppl"], "bpb": f["eval/bpb"]}


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



# ----------------------------------------------------------------------------- page
def _runs(data: dict) -> list[dict]:
    """Study records -> flat rows (config, lr, seed, losses, parameters, speed)."""
    out = []
    for rec in data["runs"].values():
        m, res = rec.get("metrics", {}), rec.get("resolved", {})
        val = m.get("val", {})
        task = res.get("task", {})
        out.append({"config": rec["cell"]["model"], "lr": float(rec["cell"]["lr"]), "seed": rec["seed"],
                    "steps": rec["steps"], "precision": res.get("train", {}).get("precision", "fp32"),
                    "params": rec["params"], "val_loss": val.get("loss"), "val_ppl": val.get("ppl"),
                    "val_bpb": val.get("bpb"), "tokens_per_s": rec["tokens_per_s"],
                    "tokens_per_step": task.get("batch_size", 0) * task.get("seq_len", 0),
                    "history": m.get("history", []), "unigram": m.get("unigram")})
    return [r for r in out if r["val_loss"] is not None]


def _aggregate(runs: list[dict]) -> dict:
    """Seed means per (config, lr), the one-LR rate (the rate most runs share) and the Akima optima."""
    by: dict[str, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by[r["config"]][r["lr"]].append(r)
    counts: dict[float, int] = defaultdict(int)
    for lrs in by.values():
        for lr in lrs:
            counts[lr] += 1
    at_lr = max(counts, key=lambda lr: (counts[lr], -abs(math.log(lr / 2e-3))))
    mean_loss = {c: {lr: fmean(r["val_loss"] for r in rs) for lr, rs in lrs.items()} for c, lrs in by.items()}
    sweep = {}
    for c, losses in mean_loss.items():
        if len(losses) >= 3:
            lrs = sorted(losses)
            lr_star, loss_star = akima_optimum(lrs, [losses[lr] for lr in lrs])
            sweep[c] = {"lrs": lrs, "val_loss": [losses[lr] for lr in lrs], "akima_lr": lr_star,
                        "akima_val_loss": loss_star}
    rows = []
    for c, lrs in by.items():
        lr = at_lr if at_lr in lrs else min(mean_loss[c], key=mean_loss[c].get)
        rs = sorted(lrs[lr], key=lambda r: r["seed"])
        rows.append({"name": c, "lr": lr, "params": rs[0]["params"], "val_ppl": math.exp(mean_loss[c][lr]),
                     "val_bpb": fmean(r["val_bpb"] for r in rs), "tokens_per_s": fmean(r["tokens_per_s"] for r in rs),
                     "ppl_seeds": [r["val_ppl"] for r in rs], "history": rs[0]["history"], "steps": rs[0]["steps"],
                     "at_fixed_lr": lr == at_lr})
    return {"by": by, "at_lr": at_lr, "rows": rows, "sweep": sweep,
            "ppl_fixed": {r["name"]: r["val_ppl"] for r in rows if r["at_fixed_lr"]}}


def _readout_section(agg: dict) -> list[str]:
    """Gradient read-out (X) vs Algorithm 1's read-out (X_alg1) at the same learning rate."""
    lines = []
    for c, lrs in agg["by"].items():
        if not c.endswith("_alg1") or c[:-5] not in agg["by"]:
            continue
        for lr, rs in sorted(lrs.items()):
            base = agg["by"][c[:-5]].get(lr)
            if base:
                a, g = [r["val_ppl"] for r in rs], [r["val_ppl"] for r in base]
                lines.append(f"| {c[:-5]} | {lr:g} | {', '.join(f'{x:.2f}' for x in g)} | "
                             f"{', '.join(f'{x:.2f}' for x in a)} | {(np.mean(a) / np.mean(g) - 1) * 100:+.1f}% |")
    if not lines:
        return []
    return ["\n## Diagonal read-out: exact gradient vs the seed's Algorithm 1\n",
            "`diagonal_readout: gradient` steps along −∇E of Eq. 2 + 12 (the KQ diagonal in scores *and* "
            "values); `algorithm1` puts the diagonal in the scores only, as the seed's Algorithm 1 prints it "
            "(not a gradient step). Same weights at initialisation (d = 0), same data and seed.\n",
            "| config | lr | val ppl, gradient (per seed) | val ppl, Algorithm 1 (per seed) | Algorithm 1 vs gradient |",
            "|---|---:|---|---|---:|", *lines]


def _step_size_section(agg: dict) -> list[str]:
    """T=1 vs T=2 with η = 1 vs T=2 with η = 0.5 (same total step as T=1), at the one-LR rate."""
    p = agg["ppl_fixed"]
    lines = [f"| {t1} | {p[t1]:.2f} | {t2} | {p[t2]:.2f} | {probe} | {p[probe]:.2f} |"
             for probe, t2, t1 in STEP_PROBES if all(n in p for n in (probe, t2, t1))]
    if not lines:
        return []
    return ["\n## Within-layer recursion and the step size (probe, not a seed claim)\n",
            "With η = 1 a second step doubles how far the layer moves the token; the probe halves η so that "
            "T = 2 moves as far in total as T = 1.\n",
            "| T=1 | val ppl | T=2, η=1 | val ppl | T=2, η=0.5 | val ppl |", "|---|---:|---|---:|---|---:|", *lines]


def render(out: Path, study, name: str, scale: str, data: dict, rows: list) -> Path:
    """The scale page ``out/README.md`` (+ ``loss_curves.png``, ``lr_sweep.png``) from the records alone."""
    from ..studies.claims import claims_table

    runs = _runs(data)
    agg = _aggregate(runs)
    fixed = [r for r in agg["rows"] if r["at_fixed_lr"]]
    uni = next((r["unigram"] for r in runs if r.get("unigram")), None)
    curves = plot_loss_curves({r["name"]: r["history"] for r in fixed if r["history"]}, out / "loss_curves.png",
                              f"CEM language-model comparison (lr {agg['at_lr']:g})",
                              {r["name"]: r["steps"] for r in fixed})
    hw = "; ".join(sorted({r.get("hardware", "unrecorded hardware") for r in data["runs"].values()}))
    text = [f"# {study.title} — {scale} scale\n",
            f"Rendered from this folder's `results.json` by `energyformer reproduce {name} --report-only --out "
            f"{study.page}` (study `studies/{name}.yaml`). Other CEM pages: [GP regression](../gp/README.md), "
            "[benchmarks](../benchmarks.md).\n"]
    if data.get("setup"):
        text.append(data["setup"] + "\n")
    text += [f"Runs: {len(runs)} ({', '.join(map(str, sorted({r['steps'] for r in runs})))} steps of "
             f"{', '.join(map(str, sorted({r['tokens_per_step'] for r in runs})))} tokens; precision "
             f"{', '.join(sorted({r['precision'] for r in runs}))}; seeds "
             f"{', '.join(map(str, sorted({r['seed'] for r in runs})))}; {hw}). Table and one-LR claims at "
             f"lr = {agg['at_lr']:g} (the rate most configs ran).",
             "", markdown_table(fixed or agg["rows"], uni), f"\n![loss curves]({curves.name})\n",
             "\n## The seed's claims on these runs\n",
             "Validation loss in nats (perplexity = exp of it); A and B are the two sides' values (mean [min, max] "
             "over seeds). ~1M-parameter models trained for minutes: a claim that does not hold here is reported "
             "plainly, but is not evidence against the paper's 86M-256M-parameter results. Each claim's rule is "
             "declared in the study file (`studies/cem-lm.yaml`) and shown beside its verdict.\n",
             claims_table(rows)]
    if agg["sweep"]:
        plot = plot_lr_sweep(agg["sweep"], out / "lr_sweep.png", "validation loss vs learning rate (Akima, seed Fig. 3a)")
        text += ["\n## Learning-rate sweep (Akima interpolation over log2 lr, seed Fig. 3a)\n",
                 f"![lr sweep]({plot.name})\n",
                 "| run | learning rates | val loss (seed mean) | interpolated optimum lr | interpolated val ppl |",
                 "|---|---|---|---:|---:|"]
        for k, v in agg["sweep"].items():
            text.append(f"| {k} | {', '.join(f'{x:g}' for x in v['lrs'])} | "
                        f"{', '.join(f'{x:.3f}' for x in v['val_loss'])} | {v['akima_lr']:.2e} | "
                        f"{math.exp(v['akima_val_loss']):.2f} |")
        text.append("\nThe table interpolates the seed means; the optimum claims (4.3-full, 4.3-lr, fig2c) take each "
                    "seed's own sweep (a seed with fewer than three rates is left out).")
    text += _readout_section(agg) + _step_size_section(agg)
    (out / "README.md").write_text("\n".join(text) + "\n")
    return out / "README.md"
