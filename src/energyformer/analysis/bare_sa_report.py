"""Page of the ``bare-sa`` study (seed 004 slides; ``studies/bare-sa.yaml``): tables, figures and the slides'
claims from a scale's ``results.json`` (and ``benchmark.md``, the verbatim output of ``benchmarks/bare_sa.py``)
alone: nothing here is hard-coded. The claims and their rules are declared in the study file; the metric
hooks that fill the records: :mod:`.bare_sa_hooks`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .bare_sa import markdown_table, paired_difference, plot_overlaps, plot_q_sweep, plot_time_curves
from .bare_sa_hooks import MAIN, VARIANTS


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


#: paired test-CE differences shown on the page (first minus second; "bayes": the Bayes-optimal predictor)
PAIRS = (("recycled x3", "3 layers"), ("recycled x3", "factored"), ("bare SA", "recycled x3"),
         ("recycled x3", "recycled x1"), ("factored", "bayes"))


def _paired(recs: dict[str, dict], ref: dict) -> dict[str, tuple[float, float]]:
    """Mean and SE of each pair's per-site test-NLL difference: from the runs' per-site NLLs (``nll``), or as
    recorded by the old program (``paired``, on the first model's record)."""
    import torch

    out = {}
    for a, b in PAIRS:
        if a not in recs:
            continue
        ma = recs[a]["metrics"]
        nb = ref.get("bayes_nll") if b == "bayes" else recs.get(b, {}).get("metrics", {}).get("nll")
        if ma.get("nll") is not None and nb is not None:
            out[f"{a} - {b}"] = paired_difference(torch.tensor(ma["nll"]), torch.tensor(nb))
        elif b in ma.get("paired", {}):
            out[f"{a} - {b}"] = tuple(ma["paired"][b])
    return out


def view(data: dict) -> dict:
    """The records of one scale (its lowest seed) as the page's sections: potts, sweep, memory, images."""
    seed = min(r["seed"] for r in data["runs"].values())
    R = {r["cell"]["run"]: r for r in data["runs"].values() if r["seed"] == seed}
    out: dict[str, Any] = {"seed": seed, "seeds": sorted({r["seed"] for r in data["runs"].values()})}
    recs = {MAIN[k]: R[k] for k in MAIN if k in R and "test" in R[k]["metrics"]}
    if recs:
        ref = recs.get("factored", {}).get("metrics", {}).get("reference", {})
        bare = recs.get("bare SA", {}).get("metrics", {})
        rec = dict(bare.get("recovery", {}))
        qs = sorted({int(k[len("loss_q"):]) for r in recs.values() for k in r["metrics"]["test"] if k.startswith("loss_q")})
        out["potts"] = {
            "models": {k: {"test": r["metrics"]["test"], "curve": r["metrics"]["timing"].get("curve", []),
                           "steps": r["steps"], "train_s": r["metrics"]["timing"]["train_s"],
                           "params": r["params"]["total"], "config": r["resolved"]} for k, r in recs.items()},
            "bayes": {k: ref[k] for k in ("bayes_loss", "bayes_accuracy", "bayes_loss_se")},
            "marginal_loss": ref["marginal_loss"], "paired": _paired(recs, ref),
            "nongradient_gap": rec.pop("nongradient_gap", float("nan")), "recovery_bare": rec,
            "recovery_factored": recs.get("factored", {}).get("metrics", {}).get("recovery", {}),
            "qs": qs, "bare_dynamics": bare.get("dynamics", {})}

    def row(r: dict) -> dict:
        m, v = r["metrics"], r["metrics"].get("val", {})
        t = m.get("training") or {}
        return {"val_loss": v.get("ce", float("inf")), "val_accuracy": v.get("accuracy", float("nan")),
                "cond_loss": v.get("cond_loss"), "train_s": m.get("timing", {}).get("train_s", float("nan")),
                "blew_up": t.get("blew_up"), "diverged": r.get("diverged"), "rerun": r.get("rerun"),
                "steps": r["steps"]}

    grid = [dict(row(r), lam=r["resolved"]["model"]["lam"], lr=r["resolved"]["train"]["lr"])
            for k, r in R.items() if re.fullmatch(r"bare_lam[\d.]+_lr[\d.]+", k)]
    if grid:
        out["sweep"] = {"bare_grid": grid,
                        "bare_variants": [dict(row(R[k]), tag=tag) for k, tag in VARIANTS.items() if k in R],
                        "recycled_lr": [dict(row(r), lr=r["resolved"]["train"]["lr"]) for k, r in R.items()
                                        if k.startswith("recycled_x1_lr")]}
    if data.get("probes", {}).get("memory"):
        out["memory"] = data["probes"]["memory"]
    out["images"] = {k[len("denoise_"):]: {**r["metrics"]["denoise"], "train_s": r["metrics"]["timing"]["train_s"],
                                           "params": r["params"]["total"], "steps": r["steps"]}
                     for k, r in R.items() if k.startswith("denoise_") and "denoise" in r["metrics"]}
    return out


def scale_note(r: dict) -> str:
    """What was run: steps per stage, seeds and what the ± are (every number from the records)."""
    P = r.get("potts", {}).get("models", {})
    parts = []
    if P:
        t = next(iter(P.values()))["config"]["task"]
        steps = sorted({v["steps"] for v in P.values()})
        parts.append(f"Potts models: {', '.join(map(str, steps))} optimiser steps each (batch {t['batch_size']})")
    S = r.get("sweep")
    if S:
        parts.append(f"sweep runs {', '.join(map(str, sorted({g['steps'] for g in S['bare_grid']})))} steps")
    I = r.get("images", {})
    if I:
        parts.append("image denoising " + ", ".join(f"{v['steps']} steps ({k}, {v['n_train']:,} training images)"
                                                    for k, v in I.items()))
    seeds = r["seeds"]
    if len(seeds) == 1:
        parts.append(f"one training seed per model (train.seed = {seeds[0]}): every ± below is a standard error over "
                     "test sites (paired where two models are compared), not a spread over seeds")
    else:
        parts.append(f"seeds {seeds}: the claims use every seed; the tables below show seed {r['seed']}, and every ± "
                     "in them is a standard error over test sites, not a spread over seeds")
    return "; ".join(parts) + "."


_BENCH_ROW = re.compile(r"^\| (?P<model>[^|]+?) \| (?P<med>[\d.]+) \[(?P<lo>[\d.]+), (?P<hi>[\d.]+)\] \|")


def benchmark_steps(text: str) -> dict[str, tuple[float, float, float]]:
    """model -> (median, min, max) ms of one training step at the Potts scale, from ``benchmark.md``."""
    part = text.split("one training step at the Potts", 1)
    if len(part) < 2:
        return {}
    table = part[1].split("\n\n")[1] if "\n\n" in part[1] else ""
    out = {}
    for line in table.splitlines():
        m = _BENCH_ROW.match(line)
        if m:
            out[m["model"]] = (float(m["med"]), float(m["lo"]), float(m["hi"]))
    return out


def step_cost_note(r: dict, bench_text: str) -> str:
    """What the committed timings show about the cost of one training step (training runs vs benchmark)."""
    M = r.get("potts", {}).get("models", {})
    bench = benchmark_steps(bench_text)
    if not M or "bare SA" not in M or "recycled x1" not in M:
        return ""
    per = {k: 1e3 * v["train_s"] / v["steps"] for k, v in M.items()}
    text = (f"**Cost per training step — the committed timings disagree.** In the training runs (wall clock, "
            f"run one after another on a shared machine) bare SA took {per['bare SA']:.1f} ms per step, "
            f"recycled x1 {per['recycled x1']:.1f} ms (bare SA {per['bare SA'] / per['recycled x1']:.2f}x "
            f"*slower*)")
    if "recycled x3" in per:
        text += f", recycled x3 {per['recycled x3']:.1f} ms"
    if bench.get("bare SA") and bench.get("recycled x1"):
        ratios = [v[0] / bench["bare SA"][0] for k, v in bench.items() if k not in ("bare SA", "factored")]
        text += (f". The interleaved benchmark of one isolated step (`benchmark.md`, B = 256) gives bare SA "
                 f"{bench['bare SA'][0]:.2f} ms vs recycled x1 {bench['recycled x1'][0]:.2f} ms: the backprop "
                 f"models cost {min(ratios):.1f}-{max(ratios):.1f}x bare SA's step there. So bare SA's step is "
                 f"cheaper in isolation, but not in these training runs, where it was slower per step than "
                 f"recycled x1; a per-step advantage inside the full training loop is not shown by the "
                 f"committed timings.")
    else:
        text += "."
    return text + "\n"


def render(out: Path, study, name: str, scale: str, data: dict, rows: list) -> str:
    """The scale page ``out/README.md`` and the figures drawn from the records (q sweep, loss against time,
    denoising overlaps); the figures of trained weights (J, U, F, examples) are written by the metric hooks."""
    from ..studies.claims import claims_table

    r = view(data)
    bench = out / "benchmark.md"
    bench_text = bench.read_text() if bench.exists() else ""
    hw = "; ".join(sorted({x.get("hardware", "unrecorded hardware") for x in data["runs"].values()}))
    L = [f"# {study.title} — {scale} scale\n",
         f"Rendered from this folder's `results.json` by `energyformer reproduce {name} --report-only --out "
         f"{study.page}` (study `studies/{name}.yaml`; the runs: `energyformer reproduce {name} --scale {scale}`), "
         f"{len(data['runs'])} runs on {hw}." + (f" {data['note']}" if data.get("note") else "")
         + " The slides give no numbers, so every claim is a comparison on our runs decided by the rule the study "
         "file declares (`energyformer.analysis.verdicts`).\n",
         scale_note(r), "",
         "Training seconds in the tables are wall clock of runs made one after another on a machine shared with "
         "other jobs, so they move with its load; the cost benchmark at the end times one isolated step of each "
         "model, interleaved in one run. The two do not agree on the cost of a step (see the note below the "
         "claims).\n",
         "## The slides' claims\n", "A and B: the two sides of each claim (one seed: the value of that run). A "
         f"declared noise in a rule is explained where it is declared (`studies/{name}.yaml`: for a test CE, twice the "
         "largest paired standard error of a test-CE difference on the page, i.e. test-set sampling noise).\n",
         claims_table(rows), "", step_cost_note(r, bench_text)]
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
              f"colour frequencies {P['marginal_loss']:.4f}; uniform {math.log(d['C']):.4f}.\n"]
        rows, bare_test = [], P["models"].get("bare SA", {}).get("test", {})
        for k, v in P["models"].items():
            tv = v["test"]
            rows.append([k, v["params"], v["steps"], v["train_s"], 1e3 * v["train_s"] / v["steps"], _ce(tv),
                         _ce(tv) - b["bayes_loss"], tv["accuracy"]])
        L += [markdown_table(["model", "parameters", "steps", "training s", "ms / step", "test CE",
                              "excess over Bayes", "test accuracy"], rows),
              "\nBare SA: CE at its readout scale calibrated on training sequences (accuracy does not depend on "
              "it); its own conditional without dynamics, P(a) ∝ Σ_j exp(λ J_ij[a, s_j]): test CE "
              f"{bare_test.get('cond_loss', float('nan')):.4f}, accuracy "
              f"{bare_test.get('cond_accuracy', float('nan')):.3f}.\n",
              f"The dynamics are not gradient descent on F: on 512 test sequences with the trained J, the term "
              f"that ∂F/∂x adds to the update's per-token gradient has {P.get('nongradient_gap', float('nan')):.2f} "
              f"times its norm.\n",
              "![q sweep](potts_q_sweep.png)\n", "![loss vs time](potts_time.png)\n",
              f"Paired test-CE differences (mean ± standard error over the {d['n_test'] * t['n_masked']:,} test "
              "sites):\n",
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
    if bench_text:
        L += ["## Cost benchmark (`benchmarks/bare_sa.py`, one run, variants interleaved)\n",
              "Written by `python benchmarks/bare_sa.py --results OUT/results.json > OUT/benchmark.md` after the "
              "reproduction (it reads the steps each model needed from `results.json`); re-rendered here as is.\n",
              bench_text.strip(), ""]
    _figures(out, r)
    text = "\n".join(L) + "\n"
    (out / "README.md").write_text(text)
    return text


def _figures(out: Path, r: dict) -> None:
    """The figures drawn from the records alone."""
    P = r.get("potts")
    if P:
        b = P["bayes"]
        plot_q_sweep({k: v["test"] for k, v in P["models"].items()}, P["qs"], b["bayes_loss"], b["bayes_accuracy"],
                     out / "potts_q_sweep.png", P["marginal_loss"])
        plot_time_curves({k: v["curve"] for k, v in P["models"].items()}, b["bayes_loss"], out / "potts_time.png")
    for name, v in r.get("images", {}).items():
        plot_overlaps(v["curves"], out / f"{name}_overlap.png",
                      f"{name}: bare SA denoising (p={v['patch']}, N={v['n_tokens']}, d={v['dim']})")
