"""Metric hooks of the ``bare-sa`` study (seed 004 slides; ``studies/bare-sa.yaml``, whose ``report:`` is the page).

Each hook sees one finished run (:class:`energyformer.studies.runner.FinishedRun`) and returns JSON for its record,
or None where it does not apply: the run's label on the study's ``run`` axis says its stage (the Potts models
:data:`POTTS`, the sweep, ``denoise_*``). Every Potts run: :func:`val`, :func:`timing`, :func:`training`; the Potts
models: :func:`test` (swept over q), :func:`nll`, :func:`reference`, :func:`recovery` (slide "pros: more
explainable"), :func:`dynamics`; the denoising runs: :func:`denoise`. Figures of trained weights are drawn here into
the page folder (:mod:`.bare_sa_page`); the memory probe is :mod:`.bare_sa_memory`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from . import bare_sa_page as fig

#: run-axis labels of the five Potts MLM models
POTTS = ("factored", "bare_sa", "recycled_x1", "recycled_x3", "layers3")
NOISES = (0.1, 0.3, 0.5)   # denoising: fractions of channel values replaced


def _trained(run) -> tuple[Any, torch.nn.Module, Any]:
    """(config, model in eval mode, task): the in-memory result when there is one, else the run directory."""
    res = run.result
    if res is not None and res.model is not None and res.task is not None:
        return res.config, res.model.eval(), res.task
    return run.trained()


def _evals(run) -> list[dict]:
    """The eval events of ``metrics.jsonl`` (the trainer logs their metrics as ``eval/<name>``)."""
    from ..train.metrics import METRICS_FILE, read_events

    out = []
    for ev in read_events(Path(run.run_dir) / METRICS_FILE, skip_bad=True):
        if ev.get("event") == "eval":
            out.append({k.removeprefix("eval/"): v for k, v in ev.items()})
    return out


def mlm_loss(m: dict[str, float]) -> float:
    """The comparable MLM loss: calibrated CE for bare SA (readout scale fitted on training data), else CE."""
    return m.get("loss_cal", m.get("loss", float("nan")))


def blew_up(losses: list[float], window: int = 10) -> str | None:
    """Whether a run's training objective ended far above where it started, in words (None if not).

    The Trainer stops only on a non-finite loss; a run whose parameters grow without bound can keep a finite loss
    (the factored J = Σ_h KᵀQ under plain SGD at the full-J step size). Criterion: the mean of the last ``window``
    losses exceeds the mean of the first ``window`` by more than max(1, |first|), or is not finite."""
    if not losses:
        return None
    n = min(window, len(losses))
    first, last = sum(losses[:n]) / n, sum(losses[-n:]) / n
    if math.isfinite(last) and last <= first + max(1.0, abs(first)):
        return None
    return f"training objective {first:.4g} -> {last:.4g}"


def val(run) -> dict | None:
    """The last validation metrics (Potts runs) with ``ce`` (calibrated for bare SA) and ``cond_loss`` (bare SA's
    own conditional; None for the other models)."""
    evs = [e for e in _evals(run) if "accuracy" in e and "bayes_loss" in e]
    if not evs:
        return None
    e = {k: v for k, v in evs[-1].items() if k not in ("event", "step", "elapsed_s", "eval_s")}
    return {**e, "ce": mlm_loss(e), "cond_loss": e.get("cond_loss")}


def timing(run) -> dict:
    """Training seconds without evaluation time, and the validation curve [[step, training s, MLM loss]]."""
    evs, spent, curve = _evals(run), 0.0, []
    for e in evs:
        spent += e.get("eval_s", 0.0)
        if "accuracy" in e and "loss" in e:
            curve.append([e["step"], e["elapsed_s"] - spent, mlm_loss(e)])
    end = evs[-1]["elapsed_s"] if evs else float(run.result.final.get("elapsed_s", run.result.seconds))
    return {"train_s": end - spent, **({"curve": curve} if curve else {})}


def training(run) -> dict | None:
    """Mean training loss of the first and last 10 steps and whether the objective blew up (:func:`blew_up`)."""
    hist = list(run.result.loss_history) if run.result is not None else []
    if not hist:
        return None
    n = min(10, len(hist))
    return {"loss_start": sum(hist[:n]) / n, "loss_end": sum(hist[-n:]) / n, "blew_up": blew_up(hist)}


def q_summary(test: dict, train_range: list[int] | None) -> dict | None:
    """From a test sweep over q: CE per q (calibrated for bare SA), the best q > 1 and its gain over q = 1,
    the best CE over every q and the worst over the training range [q_min, q_max]."""
    key = "loss_cal_q" if any(k.startswith("loss_cal_q") for k in test) else "loss_q"
    ce = {int(k[len(key):]): v for k, v in test.items() if k.startswith(key)}
    if 1 not in ce or len(ce) < 2:
        return None
    qb = min((q for q in ce if q > 1), key=ce.get)
    out = {"ce": {str(q): ce[q] for q in sorted(ce)}, "q1": ce[1], "best_more_q": qb, "best_more": ce[qb],
           "gain": ce[1] - ce[qb], "best": min(ce.values())}
    if train_range:
        out["range_worst"] = max(ce[q] for q in range(train_range[0], train_range[1] + 1) if q in ce)
    return out


def test(run) -> dict | None:
    """Test metrics of the Potts models swept over q: the task's evaluate() plus ``ce`` and ``qsweep``."""
    if run.cell.get("run") not in POTTS:
        return None
    cfg, model, task = _trained(run)
    t = task.evaluate(model, "test", sweep=True)
    rng = getattr(cfg.model, "train_iterations", None)
    q = q_summary(t, list(rng) if rng else None)
    return {**t, "ce": mlm_loss(t), **({"qsweep": q} if q else {})}


@torch.no_grad()
def nll(run) -> list[float] | None:
    """Per-site test NLL at the masked site of a Potts model (bare SA at its calibrated readout scale), 6 decimals."""
    if run.cell.get("run") not in POTTS:
        return None
    _, model, task = _trained(run)
    s, idx, masked = task.eval_set("test")
    logits = task._logits(model, idx)
    if hasattr(model, "local_loss"):
        logits = logits * task.evaluate(model, "test", sweep=False)["readout_scale"] / model.cfg.readout_scale
    return [round(float(v), 6) for v in F.cross_entropy(logits[masked].double(), s[masked], reduction="none")]


def reference(run) -> dict | None:
    """The factored run's data reference: Bayes-optimal test loss / accuracy (+ per-site NLL), colour frequencies."""
    if run.cell.get("run") != "factored":
        return None
    _, _, task = _trained(run)
    s, _, masked = task.eval_set("test")
    marg = torch.bincount(task.splits["train"].flatten(), minlength=task.C).double()
    bayes = -task.data.model.conditional_log_probs(s).gather(2, s[..., None])[..., 0][masked]
    return {**task.bayes_reference("test"), "marginal_loss": float(-(marg / marg.sum()).log()[s[masked]].mean()),
            "bayes_nll": [round(float(v), 6) for v in bayes]}


def coupling_recovery(J: torch.Tensor, J_true: torch.Tensor, U: torch.Tensor) -> dict[str, float]:
    """Learned blocks J (L, L, C, C) (one-hot colours) against the planted ``J_true (L, L) ⊗ U (C, C)``:
    ``corr``: Pearson correlation over i ≠ j of ``c_ij = ⟨J_ij, U⟩/‖U‖²`` with ``J_true[i, j]``;
    ``u_share``: fraction of Σ‖J_ij‖² along U; ``symmetry``: correlation of c_ij with c_ji."""
    Jc, Uu = J.detach().double(), U.double()
    c = torch.einsum("ijab,ab->ij", Jc, Uu) / Uu.pow(2).sum()   # (L, L)
    off = ~torch.eye(J.shape[0], dtype=torch.bool)
    corr = lambda x, y: float(torch.corrcoef(torch.stack([x, y]))[0, 1])  # noqa: E731
    return {"corr": corr(c[off], J_true.double()[off]), "symmetry": corr(c[off], c.T[off]),
            "u_share": float((c[off].pow(2) * Uu.pow(2).sum()).sum() / Jc[off].pow(2).sum())}


def recovery(run) -> dict | None:
    """Bare SA: :func:`coupling_recovery`, the non-gradient term's relative size, the J / U heatmaps; factored:
    the correlation of its positional A with the planted J and of V with U."""
    label = run.cell.get("run")
    if label not in ("bare_sa", "factored"):
        return None
    _, model, task = _trained(run)
    pm = task.data.model
    if label == "factored":
        off = ~torch.eye(pm.L, dtype=torch.bool)
        A, V = model.positional().detach().double(), model.V.detach().double()
        return {"corr_A": float(torch.corrcoef(torch.stack([A[off], pm.J[off].double()]))[0, 1]),
                "corr_V": float(torch.corrcoef(torch.stack([V.flatten(), pm.U.flatten()]))[0, 1])}
    J = model.energy.coupling()
    out = coupling_recovery(J, pm.J, pm.U)
    s, _, _ = task.eval_set("test")
    with torch.no_grad():  # the update is not gradient descent on F: relative size of the missing term
        x = model.embed(s[:512])
        st = model.energy.reprepare(model.energy.prepare(x), x)
        part = model.energy.partial_grad(x, st)
        out["nongradient_gap"] = float((model.energy.grad(x, st) - part).norm() / part.norm())
    if run.out is not None:
        fig.couplings(J, [(0, 1), (0, pm.L // 2), (pm.L - 1, 0)], run.out / "potts_J.png",
                      "bare SA on Potts: learned couplings J (one-hot colours)", true_map=pm.J)
        fig.heatmaps([("planted colour matrix U", pm.U, True)], run.out / "potts_U.png")
    return out


def dynamics(run) -> dict | None:
    """Bare SA: validation CE (calibrated) / accuracy at each q under eval-time options of the same J."""
    if run.cell.get("run") != "bare_sa":
        return None
    from ..utils.config import replace

    _, model, task = _trained(run)
    out = {}
    for label, upd in (("default", {}), ("clamp_observed", {"clamp_observed": True}), ("no renorm", {"renorm": False}),
                       ("mask_init random", {"mask_init": "random"})):
        m2 = type(model)(replace(model.cfg, **upd))
        m2.load_state_dict(model.state_dict())
        ev = task.evaluate(m2.eval(), "validation", sweep=True)
        out[label] = {k: v for k, v in ev.items() if k.startswith(("loss_cal_q", "accuracy_q"))}
    return out


def transient(overlap: list[float]) -> dict:
    """The overlap's peak step and ``fall`` = peak - final overlap when the peak is at 0 < t < T, else 0."""
    t = max(range(len(overlap)), key=overlap.__getitem__)
    return {"peak_t": t, "fall": overlap[t] - overlap[-1] if 0 < t < len(overlap) - 1 else 0.0}


def denoise(run) -> dict | None:
    """Denoising runs: curves at noise 0.1 / 0.3 / 0.5 (test) and 0.3 (training images), sizes, figures."""
    label = run.cell.get("run", "")
    if not label.startswith("denoise_"):
        return None
    cfg, model, task = _trained(run)
    name, curves, keep = label[len("denoise_"):], {}, None
    for lvl in NOISES:
        c = task.curves(model, "test", level=lvl)
        curves[f"test, noise {lvl}"] = {k: c[k] for k in ("overlap", "nearest", "mse")}
        keep = c if lvl == 0.3 else keep
    c = task.curves(model, "train", level=0.3)
    curves["train images, noise 0.3"] = {k: c[k] for k in ("overlap", "nearest", "mse")}
    emb, T = task.embedding, task.cfg.eval_steps
    if run.out is not None:
        fig.examples(keep, sorted({0, 1, min(2, T), min(5, T), T}), run.out / f"{name}_examples.png",
                     f"{name}: decoded states over the dynamics (30% of values replaced)")
        J = model.energy.coupling()
        n = J.shape[0]
        fig.couplings(J, [(0, 1), (0, n - 1), (n // 2, n // 2 + 1)], run.out / f"{name}_J.png",
                      f"{name}: learned J (in the mixed basis)")
        fig.heatmaps([(f"{name}: fixed mixing F ({emb.dim}x{emb.dim}, random orthogonal)", emb.F, True)],
                     run.out / f"{name}_F.png")
    return {"curves": curves, **transient(curves["test, noise 0.3"]["overlap"]), "patch": cfg.task.patch,
            "n_tokens": emb.n_tokens, "dim": emb.dim, "n_train": int(task.train_images.shape[0])}
