"""``energyformer reproduce bare-sa``: recycling and bare self-attention (seed 004 slides) at CPU scale.

Stages (each writes its part of ``results.json`` in ``--out``; ``--report-only`` re-renders the report):

1. **potts**: Potts MLM (L = 20, C = 10, 23,040 training sequences) with factored attention, bare
   self-attention trained by pseudo-likelihood (closed-form gradient, no backprop), one recycled block
   (q = 1, and q ∈ [2, 4] in training / 3 at evaluation) and 3 distinct blocks (backprop). Training time
   without evaluation time, validation loss against training time, test CE and accuracy against q beside
   the Bayes-optimal loss, paired test-loss differences, recovery of the planted couplings.
2. **sweep**: hyper-parameter sensitivity: bare SA over λ × learning rate and over its normalisations /
   training rules / dynamics options; the recycled block over its learning rate.
3. **memory**: peak resident memory of one training step per model (fresh subprocesses), at Potts and
   image scale.
4. **images**: denoising of spherically embedded digits (and MNIST when ``make data`` prepared it):
   overlap with the clean and nearest training image over steps, decoded MSE, J and F heatmaps.

Then ``README.md`` (tables, figures, the slides' claims with HOLDS / DOES NOT HOLD and the numbers) is
written by :mod:`energyformer.analysis.bare_sa_report`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import DataError
from ..utils.io import read_json
from ..utils.paths import writable_dir
from ..analysis import bare_sa as A
from ..analysis.bare_sa_scales import SCALES, Scale
from ..experiment import load_run_config, run_experiment
from ..train import TrainingDiverged
from ..train.callbacks import Callback
from ..utils.config import replace, to_dict

MAIN = {"factored": "potts_factored", "bare SA": "potts_bare_sa", "recycled x1": "potts_recycled_x1",
        "recycled x3": "potts_recycled_x3", "3 layers": "potts_layers3"}


QUIET = ("train.progress=false", "train.tensorboard=false", "train.save_every=0", "train.log_every=0")


class _Clock(Callback):
    """Wall clock of the optimiser steps: time after each step, minus the time spent evaluating."""

    name = "clock"

    def __init__(self) -> None:
        self.t0, self.step, self.eval_s, self.last = 0.0, 0, 0.0, 0.0

    def on_train_start(self, trainer) -> None:
        self.t0 = time.perf_counter()

    def on_step_end(self, trainer, step):
        self.step, self.last = step, time.perf_counter()
        return None

    def train_seconds(self) -> float:
        return self.last - self.t0 - self.eval_s


class _TimedEval:
    """Wraps an eval_fn: records (step, training seconds so far, metrics) and keeps eval time apart."""

    def __init__(self, fn, clock: _Clock) -> None:
        self.fn, self.clock, self.records = fn, clock, []

    def __call__(self, model):
        t = time.perf_counter()
        res = self.fn(model)
        self.records.append((self.clock.step, self.clock.train_seconds(), res))
        self.clock.eval_s += time.perf_counter() - t
        return res


def mlm_loss(m: dict[str, float]) -> float:
    """The comparable MLM loss: calibrated CE for bare SA (readout scale fitted on training data), else CE."""
    return m.get("loss_cal", m.get("loss", float("nan")))


def blew_up(losses: list[float], window: int = 10) -> str | None:
    """Whether a run's training objective ended far above where it started, in words (None if not).

    The Trainer stops only on a non-finite loss; a run whose parameters grow without bound can keep a
    finite loss (the factored J = Σ_h KᵀQ under plain SGD at the full-J step size: the objective went
    from 2.30 to about 1e27, the norms of K and Q from about 26 to 1e16 and more). Criterion: the mean
    of the last ``window`` training losses exceeds the mean of the first ``window`` by more than
    max(1, |first|), or is not finite."""
    if not losses:
        return None
    n = min(window, len(losses))
    first, last = sum(losses[:n]) / n, sum(losses[-n:]) / n
    if math.isfinite(last) and last <= first + max(1.0, abs(first)):
        return None
    return f"training objective {first:.4g} -> {last:.4g}"


def train_timed(cfg) -> tuple[torch.nn.Module, Any, dict]:
    """Train one run with :func:`~energyformer.experiment.run_experiment` (a clock callback and a timed
    evaluation hook); training time excludes evaluation. The record keeps the mean training loss of the
    first and last 10 steps and ``blew_up`` (:func:`blew_up`)."""
    clock = _Clock()
    timed: list[_TimedEval] = []
    res = run_experiment(cfg, overwrite=True, callbacks=[clock],
                         eval_hook=lambda fn: timed.append(_TimedEval(fn, clock)) or timed[-1])
    records = timed[0].records if timed else []
    rec = {"steps": res.config.train.steps, "train_s": clock.train_seconds(), "params": res.params["total"],
           "curve": [(s, t, mlm_loss(m)) for s, t, m in records],
           "val": records[-1][2] if records else {}, "config": to_dict(res.config)}
    hist = res.loss_history
    n = min(10, len(hist))
    if n:
        rec |= {"train_loss_start": sum(hist[:n]) / n, "train_loss": sum(hist[-n:]) / n}
    rec["blew_up"] = blew_up(hist)
    return res.model.eval(), res.task, rec


def _cfg(name: str, out: Path, scale: Scale, extra=()):
    ov = list(QUIET) + list(scale.overrides) + [f"out_dir={out}", f"train.eval_every={scale.eval_every}"]
    return load_run_config(f"bare_sa/{name}", ov + list(extra))


# ---------------------------------------------------------------------------------------------- stages
def stage_potts(runs: Path, scale: Scale, fig_dir: Path) -> dict:
    res: dict[str, Any] = {"models": {}}
    models, task = {}, None
    for label, name in MAIN.items():
        print(f"== potts: {label} ({name})", flush=True)
        model, task, rec = train_timed(_cfg(name, runs, scale, [f"train.steps={scale.potts_steps}"]))
        rec["test"] = task.evaluate(model, "test", sweep=True)
        models[label] = model
        res["models"][label] = rec
        print(f"   {rec['train_s']:.1f} s training, test MLM loss {mlm_loss(rec['test']):.4f}", flush=True)
    ref = task.bayes_reference("test")
    res["bayes"] = ref
    marg = torch.bincount(task.splits["train"].flatten(), minlength=task.C).double()
    marg = marg / marg.sum()
    s, _, masked = task.eval_set("test")
    res["marginal_loss"] = float(-marg.log()[s[masked]].mean())
    nll = {}
    for label, model in models.items():
        t = res["models"][label]["test"]
        sc = t["readout_scale"] / model.cfg.readout_scale if "readout_scale" in t else None
        nll[label] = A.per_sample_nll(task, model, "test", scale=sc)
    bayes_nll = -task.data.model.conditional_log_probs(s).gather(2, s[..., None])[..., 0][masked]
    pairs = [("recycled x3", "3 layers"), ("recycled x3", "factored"), ("bare SA", "recycled x3"),
             ("recycled x3", "recycled x1"), ("factored", "bayes")]
    res["paired"] = {f"{a} - {b}": A.paired_difference(nll[a], bayes_nll if b == "bayes" else nll[b])
                     for a, b in pairs}
    pm = task.data.model
    bare, fac = models["bare SA"], models["factored"]
    res["recovery_bare"] = A.coupling_recovery(bare.energy.coupling(), pm.J, pm.U)
    off = ~torch.eye(pm.L, dtype=torch.bool)
    Af = fac.positional().detach().double()
    res["recovery_factored"] = {
        "corr_A": float(torch.corrcoef(torch.stack([Af[off], pm.J[off].double()]))[0, 1]),
        "corr_V": float(torch.corrcoef(torch.stack([fac.V.detach().double().flatten(), pm.U.flatten()]))[0, 1])}
    with torch.no_grad():  # the update is not gradient descent on F: relative size of the missing term
        x = bare.embed(s[:512])
        st = bare.energy.reprepare(bare.energy.prepare(x), x)
        part = bare.energy.partial_grad(x, st)
        res["nongradient_gap"] = float((bare.energy.grad(x, st) - part).norm() / part.norm())
    A.plot_couplings(bare.energy.coupling(), [(0, 1), (0, pm.L // 2), (pm.L - 1, 0)],
                     fig_dir / "potts_J.png", "bare SA on Potts: learned couplings J (one-hot colours)",
                     true_map=pm.J)
    A.plot_matrix(pm.U, fig_dir / "potts_U.png", "planted colour matrix U")
    qs = list(task.cfg.eval_iterations)
    res["qs"] = qs
    A.plot_q_sweep({k: v["test"] for k, v in res["models"].items()}, qs, ref["bayes_loss"],
                   ref["bayes_accuracy"], fig_dir / "potts_q_sweep.png", res["marginal_loss"])
    A.plot_time_curves({k: v["curve"] for k, v in res["models"].items()}, ref["bayes_loss"],
                       fig_dir / "potts_time.png")
    # eval-time options of the trained bare SA (no retraining)
    res["bare_dynamics"] = {}
    for label, upd in (("default", {}), ("clamp_observed", {"clamp_observed": True}),
                       ("no renorm", {"renorm": False}), ("mask_init random", {"mask_init": "random"})):
        m2 = type(bare)(replace(bare.cfg, **upd))
        m2.load_state_dict(bare.state_dict())
        ev = task.evaluate(m2.eval(), "validation", sweep=True)
        res["bare_dynamics"][label] = {k: v for k, v in ev.items() if k.startswith(("loss_cal_q", "accuracy_q"))}
    return res


# Bare SA variants of the sweep (λ = 1, the potts_bare_sa config plus these overrides). The factored J
# (Eq. 19) is run at two SGD step sizes: the full-J lr 300 makes it blow up (SGD on K and Q moves J by
# about lr·(‖K‖² + ‖Q‖²)·g, a step that grows with the factors), lr 100 trains it.
BARE_VARIANTS = {
    "plain + weight decay 1e-3": ["model.objective=plain", "train.optimizer.weight_decay=0.001"],
    "plain + Frobenius r = 5": ["model.objective=plain", "model.frobenius=5.0"],
    "vMF-normalised": ["model.objective=vmf"],
    "contrastive divergence (1 step)": ["model.objective=cd", "model.init_std=0.1"],
    "one random site per step (Eq. 13)": ["model.sites=random"],
    "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 300": ["model.heads=4", "model.head_dim=3", "model.init_std=0.05"],
    "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 100": ["model.heads=4", "model.head_dim=3", "model.init_std=0.05",
                                                       "train.lr=100.0"],
    "Adam lr 0.01": ["train.optimizer.kind=adam", "train.lr=0.01"],
}


def sweep_run(runs: Path, scale: Scale, name: str, extra, tag: str) -> dict:
    """One sweep run (validation metrics of the last step, no periodic evaluation) as a table row; a run
    that diverged (non-finite loss) or blew up (:func:`blew_up`) is a result of the sweep, not an error."""
    cfg = _cfg(name, runs, scale, [f"train.steps={scale.sweep_steps}", "train.eval_every=0", f"name=sweep_{tag}"]
               + list(extra))
    try:
        model, task, rec = train_timed(cfg)
    except TrainingDiverged as err:
        return {"tag": tag, "val_loss": float("inf"), "val_accuracy": float("nan"), "train_s": float("nan"),
                "cond_loss": None, "bayes_loss": None, "diverged": str(err).split(".")[0]}
    v = rec["val"]
    return {"tag": tag, "val_loss": mlm_loss(v), "val_accuracy": v["accuracy"], "train_s": rec["train_s"],
            "cond_loss": v.get("cond_loss"), "bayes_loss": v["bayes_loss"],
            "train_loss_start": rec.get("train_loss_start"), "train_loss": rec.get("train_loss"),
            "blew_up": rec["blew_up"]}


def variant_slug(tag: str) -> str:
    return "bare_" + re.sub(r"[^a-z0-9]+", "_", tag.lower()).strip("_")


def stage_sweep(runs: Path, scale: Scale) -> dict:
    out: dict[str, Any] = {"bare_grid": [], "bare_variants": [], "recycled_lr": []}
    for lam in (0.3, 1.0, 3.0):
        for lr in (100.0, 300.0, 1000.0):
            print(f"== sweep: bare SA lam {lam} lr {lr}", flush=True)
            out["bare_grid"].append({"lam": lam, "lr": lr, **sweep_run(
                runs, scale, "potts_bare_sa", [f"model.lam={lam}", f"train.lr={lr}"], f"bare_lam{lam}_lr{lr}")})
    for tag, extra in BARE_VARIANTS.items():
        print(f"== sweep: bare SA {tag}", flush=True)
        out["bare_variants"].append(sweep_run(runs, scale, "potts_bare_sa", extra, variant_slug(tag)) | {"tag": tag})
    for lr in (5e-4, 2e-3, 8e-3):
        print(f"== sweep: recycled x1 lr {lr}", flush=True)
        out["recycled_lr"].append({"lr": lr, **sweep_run(runs, scale, "potts_recycled_x1", [f"train.lr={lr}"],
                                                         f"rec1_lr{lr}")})
    return out


def stage_memory() -> dict:
    """Peak step memory at the Potts scale (B = 256, N = 20, d = C = 10) and at image scales."""
    out = {}
    tr = {"kind": "transformer", "dim": 64, "heads": 4, "n_layers": 1, "positions": "learned", "max_seq_len": 64,
          "final_norm": "layer", "block": {"attention": "gpt", "mlp": "gelu"}}
    specs = {
        "Potts: bare SA (N=20, d=10)": ({"kind": "bare_sa", "n_tokens": 20, "dim": 10, "objective": "plain"}, 256, 20, {}),
        "Potts: recycled x3 (dim 64)": (tr, 256, 20, {"vocab": 11, "n_out": 10, "iterations": 3}),
        "Potts: 3 layers (dim 64)": (tr | {"n_layers": 3}, 256, 20, {"vocab": 11, "n_out": 10}),
        "MNIST p=4: bare SA (N=49, d=32)": ({"kind": "bare_sa", "n_tokens": 49, "dim": 32, "objective": "vmf"}, 64, 49, {}),
        "CIFAR p=4: bare SA (N=64, d=96)": ({"kind": "bare_sa", "n_tokens": 64, "dim": 96, "objective": "vmf"}, 64, 64, {}),
        "CIFAR p=4: recycled x3 (dim 96)": (tr | {"dim": 96}, 64, 64, {"vocab": 256, "n_out": 256, "iterations": 3}),
    }
    for label, (mcfg, batch, n, kw) in specs.items():
        print(f"== memory: {label}", flush=True)
        out[label] = A.step_memory(mcfg, batch, n, **kw)
    return out


def stage_images(runs: Path, scale: Scale, fig_dir: Path) -> dict:
    out: dict[str, Any] = {}
    sets = [("digits", "digits", 2, scale.digits_steps, [])]
    if scale.mnist_steps:
        try:
            from ..data.image_sources import idx_files

            idx_files("mnist")
            sets.append(("mnist", "mnist", 4, scale.mnist_steps, [f"task.n_train={scale.mnist_train}"]))
        except Exception as err:  # not prepared: say so in the report
            out["mnist_skipped"] = str(err).splitlines()[0]
    for label, name, patch, steps, extra in sets:
        print(f"== images: {label}", flush=True)
        ov = list(QUIET) + list(scale.image_overrides) + [f"out_dir={runs}", f"name=denoise_{label}",
                                                          f"task.images.name={name}", f"task.patch={patch}",
                                                          f"train.steps={steps}", "train.eval_every=0"] + extra
        model, task, rec = train_timed(load_run_config("bare_sa/digits_denoise", ov))
        curves, keep = {}, {}
        for lvl in (0.1, 0.3, 0.5):
            c = task.curves(model, "test", level=lvl)
            curves[f"test, noise {lvl}"] = {k: c[k] for k in ("overlap", "nearest", "mse")}
            if lvl == 0.3:
                keep = c
        c = task.curves(model, "train", level=0.3)
        curves["train images, noise 0.3"] = {k: c[k] for k in ("overlap", "nearest", "mse")}
        T = task.cfg.eval_steps
        A.plot_overlaps(curves, fig_dir / f"{label}_overlap.png",
                        f"{label}: bare SA denoising (p={patch}, N={task.embedding.n_tokens}, d={task.embedding.dim})")
        A.plot_denoise_examples(keep, sorted({0, 1, min(2, T), min(5, T), T}), fig_dir / f"{label}_examples.png",
                                f"{label}: decoded states over the dynamics (30% of values replaced)")
        J = model.energy.coupling()
        n = J.shape[0]
        A.plot_couplings(J, [(0, 1), (0, n - 1), (n // 2, n // 2 + 1)], fig_dir / f"{label}_J.png",
                         f"{label}: learned J (in the mixed basis)")
        A.plot_matrix(task.embedding.F, fig_dir / f"{label}_F.png", f"{label}: fixed mixing F ({task.embedding.dim}x"
                      f"{task.embedding.dim}, random orthogonal)")
        out[label] = {"curves": curves, "train_s": rec["train_s"], "params": rec["params"], "patch": patch,
                      "n_tokens": task.embedding.n_tokens, "dim": task.embedding.dim,
                      "n_train": int(task.train_images.shape[0]), "steps": steps}
    return out


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    from ..analysis.bare_sa_report import write_report

    p = argparse.ArgumentParser(prog="energyformer reproduce bare-sa", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=writable_dir("--out"), default="runs/reproduce-bare-sa", help="report folder (README.md, PNGs, results.json)")
    p.add_argument("--runs", default=None, help="run directories (default: OUT/runs)")
    p.add_argument("--scale", default="cpu", choices=sorted(SCALES),
                   help="cpu (about 1 h on one core), short (half the steps: about 30 min) or tiny (a smoke test)")
    p.add_argument("--stages", default="potts,sweep,memory,images",
                   help="comma-separated subset of potts, sweep, memory, images (others are kept from results.json)")
    p.add_argument("--report-only", action="store_true", help="train nothing: re-render README.md from results.json")
    a = p.parse_args(argv)
    out = Path(a.out)
    runs = Path(a.runs) if a.runs else out / "runs"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    if a.report_only and not path.exists():
        raise DataError(f"--report-only: {path} not found; nothing to re-render (run without --report-only "
                        f"first, or give --out the folder of an earlier run)")
    results = read_json(path, "results file") if path.exists() else {}
    if not a.report_only:
        scale = SCALES[a.scale]
        results["scale"] = a.scale
        stages = {"potts": lambda: stage_potts(runs, scale, out), "sweep": lambda: stage_sweep(runs, scale),
                  "memory": stage_memory if scale.memory else (lambda: {}),
                  "images": lambda: stage_images(runs, scale, out)}
        for name in [s.strip() for s in a.stages.split(",") if s.strip()]:
            if name not in stages:
                p.error(f"--stages: unknown stage {name!r}; allowed: {', '.join(stages)}")
            t = time.perf_counter()
            results[name] = stages[name]()
            results.setdefault("stage_seconds", {})[name] = time.perf_counter() - t
            path.write_text(json.dumps(results, indent=1, default=float))
    text = write_report(out, results)
    print(text[:2000])
    print(f"\nwrote {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
