"""Reproduce EqT's parity benchmark (seed 003 §4, Table 2; reconstructed.md §3) at CPU scale.

    energyformer reproduce eqt [--lengths 16 64] [--seeds 0 1] [--train-steps N] [--out DIR] ...

For every length and seed: a baseline (``configs/eqt/baseline.yaml``: the backbone without
refinement) and EqT (``configs/eqt/eqt.yaml``: the same backbone + an ERM, K_train = 2) are trained
on fresh random sequences with the paper's optimiser (AdamW lr 3e-4, wd 0.01, cosine, clip 1.0;
``--lr`` changes the rate) from the same initial backbone weights (seeded) and data stream, then
scored by per-token accuracy on the fixed test set of that length: baseline, EqT at K = 8 and 32.
Also measured: the convergence statistic (fraction of tokens whose relative change ‖Δh‖/‖h‖ < 1e-3
by step k, K = 32), parameters (+%), training step time and inference time at K = 8 (ratios; the
two models' steps are interleaved in one loop), and the training-loss curves at the longest length.

The training loop is a plain loop over ``task.loss`` (the parity task's loss, CE + EqT's auxiliary
terms), not the library Trainer, to keep the interleaved timing simple. Writes ``results.json``,
``README.md`` and ``loss_curve.png`` to ``--out`` (default ``docs/results/eqt``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import torch

from energyformer.models.config import ModelConfig
from energyformer.models.equilibrium import EquilibriumConfig
from energyformer.tasks.parity import ParityTask, ParityTaskConfig
from energyformer.utils.config import read_yaml, replace

ROOT = Path(__file__).resolve().parents[3]
PAPER = {  # Table 2 (%), baseline -> EqT (K = 32); the shorter lengths from the text
    8: (100.0, 100.0), 16: (100.0, 99.99), 32: (99.94, 99.85), 48: (98.09, 96.56), 64: (88.15, 92.81),
    96: (77.19, 77.68), 128: (64.64, 67.04), 192: (51.86, 59.93), 256: (55.79, 56.59)}
PAPER_OVERHEAD = {"params_pct": 8.0, "train_time_pct": 15.0, "infer_ratio_k8": 3.0, "converged_by_6": 0.94}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="energyformer reproduce eqt", description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 64])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--train-steps", type=int, default=500)
    p.add_argument("--lr", type=float, default=3e-3, help="peak AdamW rate (paper: 3e-4 at 6.3M params)")
    p.add_argument("--n-test", type=int, default=512, help="test sequences per length (paper: 4096)")
    p.add_argument("--baseline-config", default=str(ROOT / "configs/eqt/baseline.yaml"))
    p.add_argument("--eqt-config", default=str(ROOT / "configs/eqt/eqt.yaml"))
    p.add_argument("--out", default=str(ROOT / "docs/results/eqt"))
    p.add_argument("--from-results", default=None, metavar="JSON",
                   help="re-render README.md and the plots from a results.json of an earlier run (no training)")
    return p.parse_args(argv)


def _configs(args: argparse.Namespace, length: int) -> tuple[ParityTaskConfig, ModelConfig, EquilibriumConfig]:
    base, eqt = read_yaml(args.baseline_config), read_yaml(args.eqt_config)
    task = ParityTaskConfig.model_validate(base["task"])
    task = replace(task, data=replace(task.data, length=length, n_test=args.n_test))
    return task, ModelConfig.model_validate(base["model"]), EquilibriumConfig.model_validate(eqt["model"])


def _lr(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def train_pair(args: argparse.Namespace, length: int, seed: int) -> dict:
    """Train baseline and EqT side by side (interleaved steps, same data); score both."""
    tcfg, bcfg, ecfg = _configs(args, length)
    models, tasks, opts, curves, times = {}, {}, {}, {}, {}
    for name, mcfg in (("baseline", bcfg), ("eqt", ecfg)):
        task = ParityTask(tcfg, seed=seed)   # same seed: the same training stream for both
        torch.manual_seed(seed)
        models[name] = task.build_model(task.resolve_model_config(mcfg))
        tasks[name] = task
        opts[name] = torch.optim.AdamW(models[name].parameters(), lr=args.lr, weight_decay=0.01)
        curves[name], times[name] = [], []
    for step in range(args.train_steps):
        for name in ("baseline", "eqt"):
            m, opt = models[name], opts[name]
            m.train()
            for g in opt.param_groups:
                g["lr"] = _lr(step, args.train_steps, args.lr)
            batch = tasks[name].train_data.next_batch()
            t0 = time.perf_counter()
            loss, metrics = tasks[name].loss(m, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            times[name].append(time.perf_counter() - t0)
            curves[name].append(metrics["ce"])
    task = tasks["baseline"]
    acc = {"baseline": task.accuracy(models["baseline"].eval(), length),
           "eqt_k8": task.accuracy(models["eqt"].eval(), length, steps=8),
           "eqt_k32": task.accuracy(models["eqt"], length, steps=32),
           "eqt_k0": task.accuracy(models["eqt"], length, steps=0)}
    return {"length": length, "seed": seed, "accuracy": acc, "curves": curves,
            "train_step_s": {k: statistics.median(v[5:] or v) for k, v in times.items()},
            "params": {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()},
            "convergence": convergence(models["eqt"], length, seed), "infer": infer_time(models, length),
            "_models": models}


@torch.no_grad()
def convergence(model: torch.nn.Module, length: int, seed: int, n: int = 64) -> list[float]:
    """Fraction of tokens with relative change < 1e-3 at step k = 1 … 32 (K = 32, no early stop)."""
    from energyformer.data.parity import parity_test_set

    bits, _ = parity_test_set(length, n)
    out = model.eval()(bits, stats=True, steps=32)
    (st,) = out.stats.values()
    return [float((r < 1e-3).float().mean()) for r in st.relative]


@torch.no_grad()
def infer_time(models: dict, length: int, n: int = 64, reps: int = 7) -> dict:
    """Median inference seconds per batch (baseline, EqT K = 8), the two interleaved."""
    from energyformer.data.parity import parity_test_set

    bits, _ = parity_test_set(length, n)
    t: dict[str, list[float]] = {"baseline": [], "eqt_k8": []}
    for _ in range(reps):
        for name, m, kw in (("baseline", models["baseline"], {}), ("eqt_k8", models["eqt"], {"steps": 8})):
            t0 = time.perf_counter()
            m.eval()(bits, **kw)
            t[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in t.items()}


def summarise(runs: list[dict]) -> dict:
    lengths = sorted({r["length"] for r in runs})
    table = {}
    for L in lengths:
        rs = [r for r in runs if r["length"] == L]
        row = {}
        for k in ("baseline", "eqt_k8", "eqt_k32", "eqt_k0"):
            v = [100 * r["accuracy"][k] for r in rs]
            row[k] = {"mean": statistics.mean(v), "min": min(v), "max": max(v), "values": v}
        row["paper"] = PAPER.get(L)
        table[L] = row
    conv = [statistics.mean(c) for c in zip(*[r["convergence"] for r in runs])]
    p = runs[0]["params"]
    step_ratio = [r["train_step_s"]["eqt"] / r["train_step_s"]["baseline"] for r in runs]
    inf_ratio = [r["infer"]["eqt_k8"] / r["infer"]["baseline"] for r in runs]
    return {"table": table, "convergence_by_step": conv,
            "params": p, "params_pct": 100 * (p["eqt"] / p["baseline"] - 1),
            "train_step_ratio": {"median": statistics.median(step_ratio), "min": min(step_ratio), "max": max(step_ratio)},
            "infer_ratio_k8": {"median": statistics.median(inf_ratio), "min": min(inf_ratio), "max": max(inf_ratio)}}


def verdicts(runs: list[dict], summ: dict) -> dict[str, str]:
    """Plain verdicts on the paper's claims from the measured numbers."""
    out = {}
    hard = [L for L in summ["table"] if L >= 64]
    if not hard:
        out["hard-length gain"] = "not run (no length >= 64)"
    else:
        seeds = sorted({r["seed"] for r in runs})
        diffs = []
        for s in seeds:
            rs = [r for r in runs if r["seed"] == s and r["length"] in hard]
            diffs.append(100 * statistics.mean(r["accuracy"]["eqt_k32"] - r["accuracy"]["baseline"] for r in rs))
        ok = all(d > 0 for d in diffs)
        out["hard-length gain"] = (f"{'HOLDS' if ok else 'DOES NOT HOLD'}: EqT(K=32) − baseline over L ∈ {hard}, "
                                   f"per seed {', '.join(f'{d:+.2f}' for d in diffs)} points (paper +3.28 over L ≥ 64)")
        missing = [L for L in (64, 96, 128, 192, 256) if L not in hard]
        if missing:
            out["hard-length gain"] += f"; lengths {missing} not run, so only part of the claim is tested"
    k8 = [abs(r["accuracy"]["eqt_k8"] - r["accuracy"]["eqt_k32"]) * 100 for r in runs]
    out["K=8 equals K=32"] = (f"{'HOLDS' if max(k8) < 0.5 else 'DOES NOT HOLD'}: largest |acc(K=8) − acc(K=32)| "
                              f"{max(k8):.2f} points (paper: identical)")
    c6 = summ["convergence_by_step"][5] if len(summ["convergence_by_step"]) > 5 else float("nan")
    out["94% converged by k=6"] = (f"{'HOLDS' if c6 >= 0.94 else 'DOES NOT HOLD'}: {100 * c6:.1f}% of tokens have "
                                   "relative change < 1e-3 at k = 6")
    dk = [100 * (r["accuracy"]["eqt_k32"] - r["accuracy"]["eqt_k0"]) for r in runs]
    out["refinement at test time changes accuracy"] = (
        f"{'YES' if max(abs(d) for d in dk) >= 0.5 else 'NO'}: acc(K=32) − acc(K=0) of the same trained EqT model "
        f"per run {', '.join(f'{d:+.2f}' for d in dk)} points (any EqT gain without it comes from training "
        "with the energy terms, not from refining)")
    ir = summ["infer_ratio_k8"]["median"]
    out["inference ≤ 2.5× at K=8 (issue goal; paper ≈3×)"] = f"{'HOLDS' if ir <= 2.5 else 'DOES NOT HOLD'}: {ir:.2f}×"
    return out


def plot(runs: list[dict], summ: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    L = max(summ["table"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in (r for r in runs if r["length"] == L):
        for name, c in r["curves"].items():
            w = max(1, len(c) // 50)
            sm = [statistics.mean(c[i:i + w]) for i in range(0, len(c) - w + 1, w)]
            ax.plot([i * w for i in range(len(sm))], sm, label=f"{name} seed {r['seed']}",
                    color="C0" if name == "baseline" else "C1", alpha=0.5 + 0.5 * (r["seed"] == 0))
    ax.axhline(math.log(2), ls=":", color="gray", label="ln 2")
    ax.set(xlabel="step", ylabel="training CE", title=f"parity L = {L}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "loss_curve.png", dpi=110)
    files.append("loss_curve.png")
    fig, ax = plt.subplots(figsize=(5, 3))
    conv = summ["convergence_by_step"]
    ax.plot(range(1, len(conv) + 1), conv, marker=".")
    ax.axvline(6, ls=":", color="gray")
    ax.axhline(0.94, ls=":", color="gray")
    ax.set(xlabel="refinement step k", ylabel="fraction with ‖Δh‖/‖h‖ < 1e-3", ylim=(0, 1.02))
    fig.tight_layout()
    fig.savefig(out / "convergence.png", dpi=110)
    files.append("convergence.png")
    plt.close("all")
    return files


def render(args: argparse.Namespace, runs: list[dict], summ: dict, verd: dict, seconds: float) -> str:
    t = summ["table"]
    lines = ["# EqT: cumulative parity (seed 003 §4, Table 2) at CPU scale", "",
             "Generated by `energyformer reproduce eqt --lengths " + " ".join(map(str, args.lengths)) + " --seeds "
             + " ".join(map(str, args.seeds)) + f" --train-steps {args.train_steps} --lr {args.lr:g} --n-test {args.n_test}`"
             + " (`--from-results results.json` re-renders this page without training).", "",
             f"Setup: backbone {args._model}; one model per length; {args.train_steps} training steps of batch "
             f"{args._batch} fresh sequences, AdamW lr {args.lr:g} (paper 3e-4 at 6.3M params), wd 0.01, cosine, clip 1.0; "
             f"seeds {args.seeds}; {args.n_test} test sequences per length (paper 4096); wall time {seconds / 60:.1f} min "
             f"on one thread ({platform.processor() or platform.machine()}). The paper trains 6 layers × 256 wide for "
             "far longer, so absolute accuracies are not comparable; the comparison is baseline vs EqT.", "",
             "## Verdicts", ""]
    lines += [f"- **{k}** — {v}" for k, v in verd.items()]
    lines += ["", "## Per-token accuracy (%), mean [min, max] over seeds", "",
              "| L | paper baseline | paper EqT (K=32) | baseline | EqT K=0 | EqT K=8 | EqT K=32 |",
              "|---|---|---|---|---|---|---|"]
    for L, row in t.items():
        pb, pe = row["paper"] or ("–", "–")
        cell = lambda k: f"{row[k]['mean']:.2f} [{row[k]['min']:.2f}, {row[k]['max']:.2f}]"  # noqa: E731
        lines.append(f"| {L} | {pb} | {pe} | {cell('baseline')} | {cell('eqt_k0')} | {cell('eqt_k8')} | {cell('eqt_k32')} |")
    conv = summ["convergence_by_step"]
    lines += ["", "EqT K=0 is the trained EqT model with the refinement switched off (its backbone + final LayerNorm).", "",
              "## Convergence (K = 32, no early stop)", "",
              "Fraction of tokens whose relative change ‖h⁽ᵏ⁾ − h⁽ᵏ⁻¹⁾‖/‖h⁽ᵏ⁻¹⁾‖ < 1e-3 at step k (paper: 94% by k = 6): "
              + ", ".join(f"k={k + 1}: {100 * c:.1f}%" for k, c in enumerate(conv[:8])) + f", k=32: {100 * conv[-1]:.1f}%.",
              "", ("Already at k = 1 most tokens move by less than 1e-3 of their norm: the learned energy barely "
                   "moves h at this scale, so this statistic says little about reaching an equilibrium."
                   if conv[0] >= 0.9 else "The fraction grows with k as the iterates settle."),
              "", "![convergence](convergence.png)", "", "## Overheads (ratios from one interleaved run)", "",
              "| quantity | paper | ours (median [min, max] over runs) |", "|---|---|---|",
              f"| parameters | +8% | +{summ['params_pct']:.1f}% ({summ['params']['baseline']} → {summ['params']['eqt']}) |"]
    for key, label, paper in (("train_step_ratio", "training step time, K = 2", "1.15×"),
                              ("infer_ratio_k8", "inference time, K = 8", "≈3×")):
        r = summ[key]
        lines.append(f"| {label} | {paper} | {r['median']:.2f}× [{r['min']:.2f}, {r['max']:.2f}] |")
    L = max(t)
    fin = {n: statistics.mean(statistics.mean(r["curves"][n][-50:]) for r in runs if r["length"] == L)
           for n in ("baseline", "eqt")}
    lines += ["", f"## Training loss at the longest length run (L = {L})", "",
              f"Final CE (mean of the last 50 steps, mean over seeds): baseline {fin['baseline']:.3f}, EqT "
              f"{fin['eqt']:.3f} (paper at L = 192: 0.67 vs 0.57; ln 2 = 0.693).", "",
              "![loss](loss_curve.png)", "",
              "Reading: compare the EqT K=0 column with K=8/32. Where EqT beats the baseline but K=0 does as well, "
              "the gain comes from training the backbone with the energy terms (β·ℒ as auxiliary losses) and from "
              "the extra parameters, not from refining h at test time; the paper attributes it to refinement.", "",
              "The parameter overhead is larger than the paper's +8% because the reverse-prediction transformer "
              "and the mask head do not shrink with the backbone as much at width 64.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args._argv = argv or []
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _, bcfg, _ = _configs(args, args.lengths[0])
    args._model = f"{bcfg.n_layers} layers × {bcfg.dim} wide, {bcfg.heads} heads, {bcfg.positions} positions"
    args._batch = ParityTaskConfig.model_validate(read_yaml(args.baseline_config)["task"]).batch_size
    if args.from_results:
        old = json.loads(Path(args.from_results).read_text())
        for k, v in old["args"].items():
            if k not in ("out", "from_results"):
                setattr(args, k, v)
        return _write(args, out, old["runs"], old.get("seconds", float("nan")))
    t0, runs = time.time(), []
    for L in args.lengths:
        for s in args.seeds:
            r = train_pair(args, L, s)
            r.pop("_models")
            runs.append(r)
            print(f"L={L} seed={s}: " + ", ".join(f"{k} {100 * v:.2f}" for k, v in r["accuracy"].items())
                  + f"  ({(time.time() - t0) / 60:.1f} min)", flush=True)
    return _write(args, out, runs, time.time() - t0)


def _write(args: argparse.Namespace, out: Path, runs: list[dict], seconds: float) -> int:
    for r in runs:   # JSON turns the length keys into strings
        r["length"] = int(r["length"])
    summ = summarise(runs)
    verd = verdicts(runs, summ)
    plot(runs, summ, out)
    (out / "results.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
                                                  "seconds": seconds, "summary": summ, "verdicts": verd,
                                                  "runs": runs}, indent=1))
    (out / "README.md").write_text(render(args, runs, summ, verd, seconds))
    for k, v in verd.items():
        print(f"{k}: {v}")
    return 0
