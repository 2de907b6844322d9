"""The README of ``energyformer reproduce bare-sa``: tables, figures and the slides' claims, each checked
against pre-declared criteria on the measured numbers (nothing here is hard-coded: every number comes
from ``results.json``).

Criteria (declared before the runs; the report repeats them):

* *recycled x3 matches 3 layers and factored attention*: paired test-CE differences within
  ``MATCH_TOL`` nats (or within two standard errors).
* *bare SA works qualitatively like recycled transformers*: (a) it closes at least half of the gap
  between the colour-frequency baseline and recycled x3, and (b) its loss depends on q the way a recycled
  model's does: best at a finite q, worse at the largest q evaluated.
* *training is fast (no backprop)*: bare SA reaches its final validation loss in less training time than
  recycled x3 needs to reach that same loss.
* *worse test performance*: bare SA's test CE exceeds recycled x3's by more than two standard errors.
* *sensitive to hyper-parameters*: the spread (worst − best validation loss) over bare SA's learning-rate
  sweep at λ = 1 exceeds the recycled block's over its learning-rate sweep (both over a ≥ 10× range).
* *high memory usage*: bare SA's measured step memory exceeds the recycled x3 transformer's at the same
  scale.
* *transient memories*: the overlap with the clean image peaks at 0 < t < T and has fallen by more than
  0.01 at T.
* *q sampled in training makes recycling usable over a range of q*: recycled x3's test CE at every q in
  its training range [2, 4] is within 0.02 of its best, while recycled x1 loses more than 0.05 from q = 1
  to q = 2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .bare_sa import markdown_table

MATCH_TOL = 0.01


def _ce(m: dict) -> float:
    return m.get("loss_cal", m["loss"])


BLEW_UP_NOTE = (
    "\"—\" in the own-conditional column: that run's training blew up or diverged (its training "
    "objective, which for the Potts normalisation is the own-conditional CE on training batches, ended far "
    "above where it started while staying finite, so the trainer did not stop it). The own conditional "
    "is computed correctly (float64, checked against an independent reference, multi-head J included), "
    "but it scales with ‖J‖ and only reports the blown-up scale; the val CE beside it is that of the "
    "renormalised dynamics, which uses only J's direction and stays ordinary. Such a row measures a failed "
    "training, not the variant.\n")


def _failed(g: dict) -> bool:
    """A sweep row whose run diverged (non-finite loss) or blew up (finite but exploding objective)."""
    return bool(g.get("blew_up") or g.get("diverged"))


def _cond_ce(g: dict) -> Any:
    """The own-conditional CE of a sweep row; "—" where the run failed (see BLEW_UP_NOTE) or it is absent."""
    v = g.get("cond_loss")
    return "—" if v is None or _failed(g) else v


def _run_note(g: dict) -> str:
    notes = []
    if g.get("diverged"):
        notes.append(f"diverged: {g['diverged']}")
    elif g.get("blew_up"):
        v = g.get("cond_loss")
        notes.append(f"blew up: {g['blew_up']}" + (f"; own-conditional CE {v:.4g}" if isinstance(v, float) else ""))
    if g.get("rerun"):
        notes.append("rerun")
    return "; ".join(notes)


def _reruns(rows: list[dict]) -> list[str]:
    """One line naming the rows that were trained again on their own, with how (from results.json)."""
    rr = [g for g in rows if g.get("rerun")]
    if not rr:
        return []
    how = "; ".join(sorted({g["rerun"] for g in rr}))
    return [f"Rows noted *rerun* ({'; '.join(repr(g['tag']) for g in rr)}) were trained again on their own, after "
            f"the rest of the sweep: {how}.\n"]


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("HOLDS" if ok else "DOES NOT HOLD")


def _ttt(curve: list, target: float) -> float | None:
    """First training time at which the validation loss is at or below target."""
    for _, t, v in curve:
        if v <= target + 1e-12:
            return t
    return None


def claims(r: dict) -> list[tuple[str, str, str]]:
    """(claim, verdict, evidence) rows."""
    out = []
    P = r.get("potts")
    if P:
        M, pr, b = P["models"], P["paired"], P["bayes"]
        ce = {k: _ce(v["test"]) for k, v in M.items()}
        d1, s1 = pr["recycled x3 - 3 layers"]
        d2, s2 = pr["recycled x3 - factored"]
        ok = all(abs(d) <= max(MATCH_TOL, 2 * s) for d, s in ((d1, s1), (d2, s2)))
        out.append(("One recycled layer x3 matches 3 distinct layers and factored attention", _verdict(ok),
                    f"test CE: recycled x3 {ce['recycled x3']:.4f}, 3 layers {ce['3 layers']:.4f}, factored "
                    f"{ce['factored']:.4f} (Bayes {b['bayes_loss']:.4f}); paired differences {d1:+.4f} ± {s1:.4f} "
                    f"and {d2:+.4f} ± {s2:.4f} (tolerance {MATCH_TOL} nats or 2 SE)"))
        qs = P["qs"]
        bare = M["bare SA"]["test"]
        curve = [bare[f"loss_cal_q{q}"] for q in qs]
        best_q = qs[min(range(len(qs)), key=curve.__getitem__)]
        gap = P["marginal_loss"] - ce["recycled x3"]
        closed = (P["marginal_loss"] - ce["bare SA"]) / gap if gap > 0 else float("nan")
        ok = closed >= 0.5 and best_q < qs[-1] and curve[-1] > min(curve)
        out.append(("Bare SA works qualitatively like recycled transformers", _verdict(ok),
                    f"bare SA closes {closed:.0%} of the gap from the colour-frequency loss "
                    f"({P['marginal_loss']:.4f}) to recycled x3; its calibrated test CE over q = {qs}: "
                    + ", ".join(f"{v:.4f}" for v in curve) + f" (best at q = {best_q}"
                    + (": the steps of the dynamics themselves never lower the loss)" if best_q == qs[0] else ")")))
        rec3 = M["recycled x3"]
        target = M["bare SA"]["curve"][-1][2] if M["bare SA"]["curve"] else None
        if target is not None:
            tb, tr = _ttt(M["bare SA"]["curve"], target), _ttt(rec3["curve"], target)
            ok = tr is None or (tb is not None and tb < tr)
            per = {k: v["train_s"] / v["steps"] * 1e3 for k, v in M.items()}
            out.append(("Training by pseudo-likelihood is fast (no backpropagation)", _verdict(ok),
                        f"time to the validation loss {target:.4f} (bare SA's final): bare SA {tb:.1f} s, "
                        f"recycled x3 " + (f"{tr:.1f} s" if tr is not None else "never within its run") +
                        "; per step " + ", ".join(f"{k} {v:.1f} ms" for k, v in per.items())))
        d3, s3 = pr["bare SA - recycled x3"]
        out.append(("Con: worse test performance than the recycled transformer", _verdict(d3 > 2 * s3),
                    f"test CE bare SA {ce['bare SA']:.4f} vs recycled x3 {ce['recycled x3']:.4f}: "
                    f"{d3:+.4f} ± {s3:.4f}; accuracy {bare['accuracy']:.3f} vs {rec3['test']['accuracy']:.3f} "
                    f"(Bayes {b['bayes_accuracy']:.3f})"))
        rb = P["recovery_bare"]
        out.append(("Pro: more explainable (the data's planted couplings can be read in J)",
                    _verdict(rb["corr"] > 0.5),
                    f"corr(⟨J_ij, U⟩, planted J_ij) = {rb['corr']:.3f}, share of ‖J‖² along U "
                    f"{rb['u_share']:.2f} (factored attention: corr(A, J) = {P['recovery_factored']['corr_A']:.3f})"))
        r1, r3 = M["recycled x1"]["test"], rec3["test"]
        in_range = [r3[f"loss_q{q}"] for q in (2, 3, 4) if f"loss_q{q}" in r3]
        best3 = min(r3[f"loss_q{q}"] for q in qs)
        drop1 = r1.get("loss_q2", float("nan")) - r1.get("loss_q1", float("nan"))
        ok = bool(in_range) and max(in_range) - best3 <= 0.02 and drop1 > 0.05
        out.append(("Recycling: sampling q_train in [q_min, q_max] removes the dependence on q", _verdict(ok),
                    f"recycled x3 (q_train in [2, 4]) test CE at q = 2, 3, 4: "
                    + ", ".join(f"{v:.4f}" for v in in_range) + f" (best over q {best3:.4f}); recycled x1 "
                    f"(trained at q = 1): q = 1 {r1.get('loss_q1', float('nan')):.4f}, q = 2 "
                    f"{r1.get('loss_q2', float('nan')):.4f}"))
    S = r.get("sweep")
    if S and S.get("bare_grid") and S.get("recycled_lr"):
        bl = [g["val_loss"] for g in S["bare_grid"] if g["lam"] == 1.0]
        al = [g["val_loss"] for g in S["bare_grid"]]
        tl = [g["val_loss"] for g in S["recycled_lr"]]
        sb, st = max(bl) - min(bl), max(tl) - min(tl)
        out.append(("Con: sensitive to hyper-parameters", _verdict(sb > st),
                    f"spread of the validation loss over a 10x learning-rate range: bare SA {sb:.4f} nats "
                    f"(λ = 1), recycled x1 {st:.4f} nats over 16x; over λ x lr (9 runs) bare SA spans "
                    f"{max(al) - min(al):.4f}"))
    Mm = r.get("memory")
    if Mm:
        def pk(k):
            return Mm[k]["step_peak_bytes"] / 2**20

        p_b, p_t = pk("Potts: bare SA (N=20, d=10)"), pk("Potts: recycled x3 (dim 64)")
        c_b, c_t = pk("CIFAR p=4: bare SA (N=64, d=96)"), pk("CIFAR p=4: recycled x3 (dim 96)")
        out.append(("Con: high memory usage", _verdict(c_b > c_t),
                    f"step peak: Potts bare SA {p_b:.1f} MiB vs recycled x3 {p_t:.1f} MiB; CIFAR-sized (N = 64, "
                    f"d = 96) bare SA {c_b:.1f} MiB with {Mm['CIFAR p=4: bare SA (N=64, d=96)']['params']:,} "
                    f"parameters vs recycled x3 {c_t:.1f} MiB with "
                    f"{Mm['CIFAR p=4: recycled x3 (dim 96)']['params']:,}"))
    I = r.get("images")
    if I:
        for name in ("digits", "mnist"):
            if name not in I:
                continue
            c = I[name]["curves"]["test, noise 0.3"]["overlap"]
            T = len(c) - 1
            pk_t = max(range(len(c)), key=c.__getitem__)
            ok = 0 < pk_t < T and c[-1] < c[pk_t] - 0.01
            out.append((f"Transient memories: denoising overlap peaks at finite t, then decays ({name})",
                        _verdict(ok), f"overlap q(t) with the clean image: t = 0 {c[0]:.4f}, peak {c[pk_t]:.4f} at "
                        f"t = {pk_t}, t = {T} {c[-1]:.4f} (30% of channel values replaced)"))
    return out


def scale_note(r: dict) -> str:
    """What was run: steps per stage of the scale, seeds and what the ± are (every number from results.json
    except the step counts of the sweep and image stages, read from the named scale)."""
    from ..reproduce.bare_sa import SCALES

    sc = SCALES.get(r.get("scale", ""))
    P = r.get("potts", {}).get("models", {})
    seeds = sorted({v["config"]["train"].get("seed") for v in P.values()})
    steps = sorted({v["steps"] for v in P.values()})
    parts = [f"**Scale `{r.get('scale', '?')}`**"]
    if P:
        t = next(iter(P.values()))["config"]["task"]
        parts.append(f"Potts models: {', '.join(map(str, steps))} optimiser steps each (batch {t['batch_size']})")
    if sc is not None:
        parts.append(f"sweep runs {sc.sweep_steps} steps; image denoising {sc.digits_steps} steps (digits), "
                     f"{sc.mnist_steps} (MNIST, {sc.mnist_train:,} training images)")
        if r.get("scale") == "short":
            parts.append("half the optimiser steps of the default `cpu` scale, same data and models, so that the "
                         "run takes about 30 minutes on one shared core")
    parts.append(f"one training seed per model (train.seed = {', '.join(map(str, seeds))}): every ± below is a "
                 "standard error over test sites (paired where two models are compared), not a spread over seeds")
    return "; ".join(parts) + "."


def write_report(out: Path, r: dict) -> str:
    """README.md in ``out`` from the results; returns its text."""
    L = ["# Recycling and bare self-attention (seed 004 slides) at CPU scale\n",
         "Produced by `energyformer reproduce bare-sa` (scale "
         f"`{r.get('scale', '?')}`; stage wall times: "
         + ", ".join(f"{k} {v / 60:.1f} min" for k, v in r.get("stage_seconds", {}).items())
         + "; one CPU thread on a shared 2-core machine). The slides give no numbers, so every claim is checked "
         "against criteria declared in `energyformer/analysis/bare_sa_report.py` before the runs.\n",
         scale_note(r), "",
         "Training seconds in the tables are wall clock of runs made one after another on a machine shared with "
         "other jobs, so they move with its load; the cost benchmark at the end times the models interleaved in "
         "one run, and its ratios are the ones to compare.\n",
         "## The slides' claims\n", markdown_table(["claim", "verdict", "measured"], claims(r)), ""]
    P = r.get("potts")
    if P:
        b = P["bayes"]
        t = next(iter(P["models"].values()))["config"]["task"]
        d = t["data"]
        L += ["## Potts masked-token prediction\n",
              f"Data: L = {d['L']} sites, C = {d['C']} colours, β = {d['beta']}, J ~ N(0, 1/L), U ~ N(0, 1) "
              f"(coupling seed {d['coupling_seed']}, sample seed {d['sample_seed']}); "
              f"{d['n_train'] - t['n_validation']:,} training, {t['n_validation']:,} validation and {d['n_test']:,} test sequences; {t['n_masked']} masked "
              f"site per sequence. Bayes-optimal test CE "
              f"{b['bayes_loss']:.4f} ± {b['bayes_loss_se']:.4f} (accuracy {b['bayes_accuracy']:.3f}); "
              f"colour frequencies {P['marginal_loss']:.4f}; uniform {math.log(10):.4f}.\n"]
        rows = []
        for k, v in P["models"].items():
            t = v["test"]
            rows.append([k, v["params"], v["steps"], v["train_s"], 1e3 * v["train_s"] / v["steps"], _ce(t),
                         _ce(t) - b["bayes_loss"], t["accuracy"]])
        L += [markdown_table(["model", "parameters", "steps", "training s", "ms / step", "test CE",
                              "excess over Bayes", "test accuracy"], rows),
              "\nBare SA: CE at its readout scale calibrated on training sequences (accuracy does not depend on "
              "it); its own conditional without dynamics, P(a) ∝ Σ_j exp(λ J_ij[a, s_j]): test CE "
              f"{P['models']['bare SA']['test'].get('cond_loss', float('nan')):.4f}, accuracy "
              f"{P['models']['bare SA']['test'].get('cond_accuracy', float('nan')):.3f}.\n",
              f"The dynamics are not gradient descent on F: on 512 test sequences with the trained J, the term "
              f"that ∂F/∂x adds to the update's per-token gradient has {P.get('nongradient_gap', float('nan')):.2f} "
              f"times its norm.\n",
              "![q sweep](potts_q_sweep.png)\n", "![loss vs time](potts_time.png)\n",
              "Paired test-CE differences (mean ± standard error over the 3,200 test sites):\n",
              markdown_table(["pair", "difference", "SE"], [[k, *v] for k, v in P["paired"].items()]), ""]
        if P.get("bare_dynamics"):
            qs = P["qs"]
            L += ["Bare SA dynamics options (same trained J, validation, calibrated CE / accuracy at each q):\n",
                  markdown_table(["option"] + [f"q={q}" for q in qs],
                                 [[k] + [f"{v.get(f'loss_cal_q{q}', float('nan')):.4f} / "
                                         f"{v.get(f'accuracy_q{q}', float('nan')):.3f}" for q in qs]
                                  for k, v in P["bare_dynamics"].items()]), ""]
        L += ["Learned couplings (bare SA; one-hot colours, so each J_ij is a C×C block) beside the planted "
              "|J_ij|:\n", "![J](potts_J.png) ![U](potts_U.png)\n"]
    S = r.get("sweep")
    if S:
        L += ["## Hyper-parameter sweep (validation, shorter runs)\n",
              markdown_table(["bare SA λ", "SGD lr", "val CE", "val accuracy", "own conditional CE"],
                             [[g["lam"], g["lr"], g["val_loss"], g["val_accuracy"], _cond_ce(g)]
                              for g in S["bare_grid"]]), "",
              "With the Potts normalisation the loss is CE(λJ)/λ, so SGD moves λJ by λ·lr·g(λJ): runs with the "
              "same product λ·lr train the same λJ, and the q = 1 prediction (masked token from 0, renormalised) "
              "depends only on J's direction: such rows are identical.\n",
              markdown_table(["bare SA variant (λ = 1)", "val CE", "val accuracy", "own conditional CE", "training s",
                              "note"],
                             [[g["tag"], g["val_loss"], g["val_accuracy"], _cond_ce(g), g["train_s"], _run_note(g)]
                              for g in S["bare_variants"]]), "",
              *([BLEW_UP_NOTE] if any(_failed(g) for g in S["bare_grid"] + S["bare_variants"]) else []),
              *_reruns(S["bare_variants"]),
              markdown_table(["recycled x1 AdamW lr", "val CE", "val accuracy", "training s"],
                             [[g["lr"], g["val_loss"], g["val_accuracy"], g["train_s"]] for g in S["recycled_lr"]]), ""]
    Mm = r.get("memory")
    if Mm:
        L += ["## Memory of one training step (measured, fresh process, float32)\n",
              markdown_table(["model", "parameters", "parameter MiB", "step peak MiB"],
                             [[k, v["params"], v["param_bytes"] / 2**20, v["step_peak_bytes"] / 2**20]
                              for k, v in Mm.items()]), ""]
    I = r.get("images")
    if I:
        L += ["## Denoising spherically embedded images\n"]
        if "mnist_skipped" in I:
            L.append(f"MNIST was not run: {I['mnist_skipped']}\n")
        for name in ("digits", "mnist"):
            if name not in I:
                continue
            v = I[name]
            L += [f"**{name}**: p = {v['patch']}, N = {v['n_tokens']} tokens of d = {v['dim']}, {v['n_train']} "
                  f"training images, {v['steps']} steps ({v['train_s']:.1f} s), J has {v['params']:,} numbers.\n",
                  markdown_table(["setting", "q(0)", "peak q", "peak t", f"q(T={len(next(iter(v['curves'].values()))['overlap']) - 1})",
                                  "nearest-train overlap at peak", "MSE(0)", "MSE at peak"],
                                 [[k, c["overlap"][0], max(c["overlap"]), max(range(len(c["overlap"])), key=c["overlap"].__getitem__),
                                   c["overlap"][-1], c["nearest"][max(range(len(c["overlap"])), key=c["overlap"].__getitem__)],
                                   c["mse"][0], c["mse"][max(range(len(c["overlap"])), key=c["overlap"].__getitem__)]]
                                  for k, c in v["curves"].items()]), "",
                  f"![{name} overlap]({name}_overlap.png)\n", f"![{name} examples]({name}_examples.png)\n",
                  f"![{name} J]({name}_J.png) ![{name} F]({name}_F.png)\n"]
    bench = out / "benchmark.md"
    if bench.exists():
        L += ["## Cost benchmark (`benchmarks/bare_sa.py`, one run, variants interleaved)\n",
              "Written by `python benchmarks/bare_sa.py --results OUT/results.json > OUT/benchmark.md` after the "
              "reproduction (it reads the steps each model needed from `results.json`); re-rendered here as is.\n",
              bench.read_text().strip(), ""]
    text = "\n".join(L) + "\n"
    (out / "README.md").write_text(text)
    return text
