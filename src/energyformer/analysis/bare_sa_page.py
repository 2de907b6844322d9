"""What the ``bare-sa`` page (``studies/bare-sa.yaml``, ``report:``) cannot say as a table or a generic plot.

* Sections (``fn(ctx) -> markdown``): :func:`paired` (per-site paired test-CE differences with their standard
  errors), :func:`denoising` (per image set: the overlap / MSE summary and its curves figure) and :func:`cost`
  (the training runs' ms per step against ``benchmark.md``, re-rendered as is).
* Figures of trained weights, drawn by the metric hooks (:mod:`.bare_sa`) into the page folder:
  :func:`heatmaps`, :func:`couplings`, :func:`examples`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import torch

from ..utils.markdown import md_table
from .figures import save_figure

#: paired test-CE differences (first minus second run label; "bayes": the Bayes-optimal predictor)
PAIRS = (("recycled_x3", "layers3"), ("recycled_x3", "factored"), ("bare_sa", "recycled_x3"),
         ("recycled_x3", "recycled_x1"), ("factored", "bayes"))
#: the model names under which migrated records (the old program) hold their paired differences
_OLD = {"layers3": "3 layers", "recycled_x1": "recycled x1", "recycled_x3": "recycled x3"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    return save_figure(fig, path)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(md_table(header, ([fmt(v) for v in r] for r in rows))) + "\n"


def _runs(ctx, seed: int | None = None) -> dict[str, dict]:
    """run label -> record of one seed (the lowest by default)."""
    seed = min(r["seed"] for r in ctx.records) if seed is None else seed
    return {r["cell"]["run"]: r for r in ctx.records if r["seed"] == seed}


# ---------------------------------------------------------------------------------------------- sections
def paired(ctx) -> str:
    """Mean and standard error over test sites of each pair's per-site test-NLL difference: from the runs'
    per-site NLLs (``nll``, the factored run's ``reference.bayes_nll``), or as the old program recorded them."""
    rows = []
    for seed in sorted({r["seed"] for r in ctx.records}):
        R = _runs(ctx, seed)
        bayes = R.get("factored", {}).get("metrics", {}).get("reference", {}).get("bayes_nll")
        for a, b in PAIRS:
            ma = R.get(a, {}).get("metrics", {})
            nb = bayes if b == "bayes" else R.get(b, {}).get("metrics", {}).get("nll")
            if ma.get("nll") is not None and nb is not None:
                d = torch.tensor(ma["nll"], dtype=torch.float64) - torch.tensor(nb, dtype=torch.float64)
                rows.append([f"{a} − {b}", seed, float(d.mean()), float(d.std() / math.sqrt(d.numel()))])
            elif _OLD.get(b, b) in ma.get("paired", {}):
                rows.append([f"{a} − {b}", seed, *ma["paired"][_OLD.get(b, b)]])
    if not rows:
        return ""
    return ("Paired test-CE differences (mean and standard error over the test sites, paired site by site):\n\n"
            + _table(["pair", "seed", "difference", "SE"], rows))


def denoising(ctx) -> str:
    """Per denoising run (lowest seed): sizes, the overlap / MSE summary of each setting, the curves figure
    (drawn here) and the figures its metric hook drew (decoded examples, J, F)."""
    parts = []
    for label, r in _runs(ctx).items():
        v = r["metrics"].get("denoise")
        if not label.startswith("denoise_") or not v:
            continue
        name, rows = label[len("denoise_"):], []
        for k, c in v["curves"].items():
            o = c["overlap"]
            t = max(range(len(o)), key=o.__getitem__)
            rows.append([k, o[0], o[t], t, o[-1], c["nearest"][t], c["mse"][0], c["mse"][t]])
        T = len(next(iter(v["curves"].values()))["overlap"]) - 1
        parts += [f"**{name}**: p = {v['patch']}, N = {v['n_tokens']} tokens of d = {v['dim']}, {v['n_train']} "
                  f"training images, {r['steps']} steps ({r['metrics']['timing']['train_s']:.1f} s), J has "
                  f"{r['params'].get('total', 0):,} numbers.\n",
                  _table(["setting", "q(0)", "peak q", "peak t", f"q(T={T})", "nearest-train overlap at peak",
                          "MSE(0)", "MSE at peak"], rows),
                  f"![{name} overlap]({_overlaps(v['curves'], ctx.out / f'{name}_overlap.png', name, v).name})\n"]
        parts += [f"![{name} {f}]({name}_{f}.png)\n" for f in ("examples", "J", "F")
                  if (ctx.out / f"{name}_{f}.png").exists()]
    return "\n".join(parts)


def _overlaps(curves: dict[str, dict[str, list[float]]], path: Path, name: str, v: dict) -> Path:
    """Overlap with the clean image (solid) and the nearest training image (dashed); decoded MSE; per setting."""
    fig, axes = _plt().subplots(1, 2, figsize=(11, 4))
    for k, (setting, c) in enumerate(curves.items()):
        t = list(range(len(c["overlap"])))
        axes[0].plot(t, c["overlap"], "-", color=f"C{k}", label=f"{setting}: clean")
        axes[0].plot(t, c["nearest"], "--", color=f"C{k}", label=f"{setting}: nearest train")
        axes[1].plot(t, c["mse"], "-", color=f"C{k}", label=setting)
    axes[0].set(xlabel="step t", ylabel="overlap q(t)",
                title=f"{name}: bare SA denoising (p={v['patch']}, N={v['n_tokens']}, d={v['dim']})")
    axes[1].set(xlabel="step t", ylabel="decoded-pixel MSE ([0,1] scale)", title="reconstruction error")
    axes[0].legend(fontsize=6)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


_BENCH_ROW = re.compile(r"^\| (?P<model>[^|]+?) \| (?P<med>[\d.]+) \[[\d.]+, [\d.]+\] \|")


def cost(ctx) -> str:
    """The cost of a training step: ms per step of the Potts training runs (wall clock) against the isolated,
    interleaved steps of ``benchmark.md`` (the verbatim output of ``benchmarks/bare_sa.py``, shown after)."""
    R = _runs(ctx)
    ms = {k: 1e3 * R[k]["metrics"]["timing"]["train_s"] / R[k]["steps"]
          for k in ("bare_sa", "recycled_x1", "recycled_x3") if "timing" in R.get(k, {}).get("metrics", {})}
    text = (ctx.out / "benchmark.md").read_text() if (ctx.out / "benchmark.md").exists() else ""
    steps = text.split("one training step at the Potts", 1)[-1].split("\n\n")[1:2]
    bench = {m["model"]: float(m["med"]) for line in "".join(steps).splitlines() if (m := _BENCH_ROW.match(line))}
    if not ({"bare_sa", "recycled_x1"} <= set(ms) and {"bare SA", "recycled x1"} <= set(bench)):
        return ""
    ratios = [v / bench["bare SA"] for k, v in bench.items() if k not in ("bare SA", "factored")]
    agree = (ms["bare_sa"] < ms["recycled_x1"]) == (bench["bare SA"] < bench["recycled x1"])
    x3 = f", recycled x3 {ms['recycled_x3']:.1f} ms" if "recycled_x3" in ms else ""
    return (f"**Cost per training step.** In the training runs (wall clock, one after another on a shared machine) "
            f"bare SA took {ms['bare_sa']:.1f} ms per step, recycled x1 {ms['recycled_x1']:.1f} ms (bare SA "
            f"{ms['bare_sa'] / ms['recycled_x1']:.2f}x){x3}. The interleaved benchmark of one isolated step (below, "
            f"B = 256) gives bare SA {bench['bare SA']:.2f} ms vs recycled x1 {bench['recycled x1']:.2f} ms: the "
            f"backprop models cost {min(ratios):.1f}-{max(ratios):.1f}x bare SA's step there. The two "
            + ("agree on which step is cheaper." if agree else "disagree on which step is cheaper, so a per-step "
               "advantage inside the full training loop is not shown by the committed timings.")
            + "\n\n## Cost benchmark (`benchmarks/bare_sa.py`, one run, variants interleaved)\n\nWritten by `python "
            "benchmarks/bare_sa.py --results OUT/results.json > OUT/benchmark.md` after the reproduction (it reads the "
            "steps each model needed from `results.json`); re-rendered here as is.\n\n" + text.strip())


# ---------------------------------------------------------------------------------------------- weight figures
def heatmaps(maps: list[tuple[str, torch.Tensor, bool]], path: Path, title: str = "") -> Path:
    """One panel per (title, matrix, signed): signed ones on a symmetric red-blue scale, the others viridis."""
    fig, axes = _plt().subplots(1, len(maps), figsize=(3.2 * len(maps), 3.2), squeeze=False)
    for ax, (name, m, signed) in zip(axes[0], maps):
        m = m.detach().float().cpu()
        v = float(m.abs().max()) or 1.0
        im = ax.imshow(m.numpy(), cmap="RdBu_r" if signed else "viridis", **({"vmin": -v, "vmax": v} if signed else {}))
        ax.set_title(name, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def couplings(J: torch.Tensor, pairs: list[tuple[int, int]], path: Path, title: str,
              true_map: torch.Tensor | None = None) -> Path:
    """‖J_ij‖_F over (i, j) (and the planted |J_true| beside it), then a few blocks J_ij."""
    return heatmaps([("‖J_ij‖_F", J.detach().flatten(2).norm(dim=-1), False)]
                    + ([("planted |J_ij| (Potts)", true_map.abs(), False)] if true_map is not None else [])
                    + [(f"J[{i},{j}]", J[i, j], True) for i, j in pairs], path, title)


def examples(curves: dict[str, Any], steps: list[int], path: Path, title: str) -> Path:
    """Rows: images; columns: clean, corrupted, decoded state at the given steps."""
    clean, noisy, dec = curves["clean"], curves["noisy"], curves["decoded"]
    n, cols = min(4, clean.shape[0]), 2 + len(steps)
    fig, axes = _plt().subplots(n, cols, figsize=(1.6 * cols, 1.6 * n))
    for r in range(n):
        for c, img in enumerate([clean[r], noisy[r]] + [dec[t, r] for t in steps]):
            img = (img.float() / 255.0).numpy()   # (channels, H, W)
            axes[r, c].imshow(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0), cmap="gray", vmin=0, vmax=1)
            axes[r, c].axis("off")
    for c, lab in enumerate(["clean", "corrupted"] + [f"t = {t}" for t in steps]):
        axes[0, c].set_title(lab, fontsize=8)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)
