"""``energyformer reproduce cem-lm``: the CEM seed's language-model comparisons at CPU scale (§4.1-4.4).

Runs a chosen subset of ``configs/lm/*.yaml`` — each at one or several learning rates (``--lr-sweep``,
seed Fig. 3a: five rates, Akima interpolation of the optimum) and one or several seeds (``--seeds``)
— then writes a report: parameters by part, validation perplexity (per seed), bits per byte,
tokens/s, the unigram baseline, the seed's claims marked HOLDS / DOES NOT HOLD, the LR sweep and the
gradient vs Algorithm 1 read-out comparison, with ``loss_curves.png`` and ``lr_sweep.png``.

Protocol (as the seed): claims of §4.1/4.2/4.4 and Fig. 3c/4 compare runs at one learning rate,
Llama's best on the sweep grid (``--at-lr`` overrides); §4.3 compares each model at its own Akima
optimum. A finished run (``summary.json`` in its run directory) is not trained again, so a suite can
be stopped and restarted; the command's report covers every finished run in ``--out``, and reports
of several output folders merge (``--report-only --from``;
``--from`` also takes a ``results.json``). ``--report-only --out DIR`` on a results folder (one holding
``lm_results.json`` / ``gp_results.json``, e.g. ``docs/results/cem``) re-renders its pages — README.md,
gp.md, gp_findings.md and their figures — from those files alone (the page contract of issue 22).

The seed trains 86M-256M-parameter models on SlimPajama for billions of tokens; we train ~1M-parameter
models on Shakespeare for minutes, so only the *direction* of the seed's claims can be checked.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..utils.io import read_json
from ..utils.cliargs import count, positive_float
from ..utils.paths import writable_dir, writable_file
from ..analysis.lm_claims import claims_markdown
from ..analysis.lm_report import akima_optimum, markdown_table, plot_loss_curves, plot_lr_sweep
from ..experiment import load_run_config, run_experiment

#: named subsets of configs/lm (seed section in brackets)
SUITES: dict[str, list[str]] = {
    "demo": ["lm/demo_llama", "lm/demo_cem"],
    "drop-in": ["lm/llama", "lm/cem_attn_t1", "lm/cem_mlp_t1", "lm/cem_mlp_t1_param_matched"],  # §4.1
    "recursion": ["lm/llama", "lm/cem_attn_t2_diag", "lm/cem_attn_t2_dlr",
                  "lm/cem_mlp_t2_diag", "lm/cem_mlp_t2_dlr"],                                   # §4.2
    "full": ["lm/llama", "lm/cem_full"],                                                         # §4.3
    "kq-diagonal": ["lm/cem_kq_none", "lm/cem_kq_shared", "lm/cem_kq_per_head"],                 # §4.4, Fig. 3b
    "reuse": ["lm/mlp_plain_reuse", "lm/cem_mlp_t1", "lm/cem_mlp_t2_diag",
              "lm/attn_plain_reuse", "lm/cem_attn_t1", "lm/cem_attn_t2_diag"],                   # Fig. 3c / 4
    "sweep": ["lm/llama", "lm/cem_full", "lm/cem_attn_t2_dlr"],                                  # Fig. 3a
    "readout": ["lm/cem_full_alg1", "lm/cem_kq_shared_alg1"],            # gradient vs Algorithm 1 read-out
    "step-size": ["lm/cem_attn_t2_eta0.5", "lm/cem_mlp_t2_eta0.5"],      # T=2 with T·η = 1 (not in the seed)
}
#: step-size probes: (probe, T=2 with η = 1, T=1)
STEP_PROBES = [("cem_attn_t2_eta0.5", "cem_attn_t2_diag", "cem_attn_t1"),
               ("cem_mlp_t2_eta0.5", "cem_mlp_t2_diag", "cem_mlp_t1")]
#: the seed's rates (§4.3: five rates from 0.0005 to 0.008, doubling)
SEED_RATES = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]
HISTORY_POINTS = 80


def _stem(name: str) -> str:
    return Path(name).name


def _history(run_dir: Path) -> list[float]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    hist = [rec["loss"] for rec in map(json.loads, path.read_text().splitlines())
            if rec.get("event", "train") == "train" and "loss" in rec]
    if len(hist) > HISTORY_POINTS:  # keep the report's data small: block means
        hist = [float(np.mean(c)) for c in np.array_split(np.asarray(hist), HISTORY_POINTS)]
    return hist


def run_one(name: str, out: Path, overrides: list[str], lr: float | None, seed: int, overwrite: bool) -> dict:
    """Train one (config, lr, seed) unless its run directory holds a finished ``summary.json``."""
    stem = _stem(name)
    ov = list(overrides) + [f"out_dir={out}", f"train.seed={seed}"] + ([f"train.lr={lr}"] if lr else [])
    cfg = load_run_config(name, ov)
    run_name = f"{stem}_lr{cfg.train.lr:g}" + (f"_s{seed}" if seed else "")
    cfg = load_run_config(name, ov + [f"name={run_name}"])
    summary = cfg.run_dir / "summary.json"
    if summary.exists() and not overwrite:
        rec = json.loads(summary.read_text())
        if rec.get("steps") == cfg.train.steps:
            print(f"== {run_name}: finished earlier, val ppl {rec['val_ppl']:.2f}", flush=True)
            return rec
    print(f"== {run_name}: {cfg.train.steps} steps, lr {cfg.train.lr:g}, seed {seed}", flush=True)
    resume = not overwrite and cfg.run_dir.is_dir() and any(cfg.run_dir.glob("ckpt-*"))  # interrupted earlier
    res = run_experiment(cfg, resume=resume, overwrite=overwrite)
    task = res.task
    rec = {"config": stem, "name": run_name, "lr": cfg.train.lr, "seed": seed, "steps": cfg.train.steps,
           "precision": cfg.train.precision, "params": res.params,
           "val_loss": res.final.get("eval/loss"), "val_ppl": res.final.get("eval/ppl"),
           "val_bpb": res.final.get("eval/bpb"), "tokens_per_s": res.tokens_per_s, "seconds": res.seconds,
           "tokens_per_step": task.cfg.batch_size * task.cfg.seq_len, "run_dir": str(cfg.run_dir),
           "history": _history(cfg.run_dir)}
    if "unigram_val_ppl" not in rec:
        from ..data.text import unigram_perplexity

        rec["unigram_val_ppl"] = unigram_perplexity(task.train_ids, task.windows("validation").data,
                                                    task.vocab_size)
    summary.write_text(json.dumps(rec, indent=1))
    return rec


def run_suite(configs: list[str], out: Path, overrides: list[str], lr_sweep: list[float] | None = None,
              title: str = "CEM language-model comparison", overwrite: bool = False,
              seeds: list[int] | None = None, report: Path | None = None) -> tuple[list[dict], str]:
    """Train every config (at every swept LR and seed), then write the report; returns (rows, text)."""
    records = [run_one(name, out, overrides, lr, seed, overwrite)
               for name in configs for lr in (lr_sweep or [None]) for seed in (seeds or [0])]
    return write_report(records, out, report, title)


# ----------------------------------------------------------------------------------- aggregation
def aggregate(records: list[dict], at_lr: float | None = None) -> dict:
    """Seed means per (config, lr), the fixed comparison rate, Akima optima and the seed noise."""
    by = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("val_loss") is not None:
            by[r["config"]][float(r["lr"])].append(r)
    mean_loss = {c: {lr: float(np.mean([r["val_loss"] for r in rs])) for lr, rs in lrs.items()} for c, lrs in by.items()}
    if at_lr is None:
        if "llama" in mean_loss and len(mean_loss["llama"]) >= 2:
            at_lr = min(mean_loss["llama"], key=mean_loss["llama"].get)  # Llama's best grid rate
        else:
            counts = defaultdict(int)
            for lrs in by.values():
                for lr in lrs:
                    counts[lr] += 1
            at_lr = max(counts, key=lambda lr: (counts[lr], -abs(math.log(lr / 2e-3))))
    sweep, ppl_opt, lr_opt = {}, {}, {}
    for c, losses in mean_loss.items():
        if len(losses) >= 3:
            lrs = sorted(losses)
            lr_star, loss_star = akima_optimum(lrs, [losses[lr] for lr in lrs])
            sweep[c] = {"lrs": lrs, "val_loss": [losses[lr] for lr in lrs], "akima_lr": lr_star,
                        "akima_val_loss": loss_star,
                        "seeds": [sorted(r["seed"] for r in by[c][lr]) for lr in lrs]}
            ppl_opt[c], lr_opt[c] = math.exp(loss_star), lr_star
    spreads = []
    for c, lrs in by.items():
        for rs in lrs.values():
            if len(rs) >= 2:
                p = [r["val_ppl"] for r in rs]
                spreads.append((max(p) - min(p)) / 2 / float(np.mean(p)))
    rows = []
    for c, lrs in by.items():
        lr = at_lr if at_lr in lrs else min(mean_loss[c], key=mean_loss[c].get)
        rs = sorted(lrs[lr], key=lambda r: r["seed"])
        rows.append({"name": c, "lr": lr, "params": rs[0]["params"], "val_ppl": math.exp(mean_loss[c][lr]),
                     "val_bpb": float(np.mean([r["val_bpb"] for r in rs])),
                     "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in rs])),
                     "ppl_seeds": [r["val_ppl"] for r in rs], "run_dir": rs[0]["run_dir"],
                     "history": rs[0].get("history", []), "steps": rs[0].get("steps"),
                     "at_fixed_lr": lr == at_lr})
    ppl_fixed = {r["name"]: r["val_ppl"] for r in rows if r["at_fixed_lr"]}
    # per-seed validation losses at the one-LR rate (the claims' data) and the losses' seed ranges
    loss_fixed = {c: [r["val_loss"] for r in sorted(lrs[at_lr], key=lambda r: r["seed"])]
                  for c, lrs in by.items() if at_lr in lrs}
    ranges = [(max(v) - min(v), c, lr) for c, lrs in by.items() for lr, rs in lrs.items()
              if len(v := [r["val_loss"] for r in rs]) >= 2]
    return {"by": by, "at_lr": at_lr, "rows": rows, "ppl_fixed": ppl_fixed, "sweep": sweep,
            "ppl_opt": ppl_opt, "lr_opt": lr_opt, "noise": max(spreads) if spreads else None,
            "n_noise_groups": len(spreads), "loss_fixed": loss_fixed,
            "loss_opt": {c: v["akima_val_loss"] for c, v in sweep.items()},
            "loss_noise": max(ranges) if ranges else None, "loss_ranges": sorted(ranges, reverse=True)}


def _readout_section(agg: dict) -> list[str]:
    """Gradient read-out (X) vs Algorithm 1's read-out (X_alg1) at the same learning rate."""
    lines = []
    for c, lrs in agg["by"].items():
        if not c.endswith("_alg1") or c[:-5] not in agg["by"]:
            continue
        for lr, rs in sorted(lrs.items()):
            base = agg["by"][c[:-5]].get(lr)
            if not base:
                continue
            a = [r["val_ppl"] for r in rs]
            g = [r["val_ppl"] for r in base]
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


def gp_section(path: Path) -> list[str]:
    """The GP reproduction's claim verdicts (``reproduce cem-gp --report``'s gp_results.json), linked."""
    from ..analysis.gp_claims import claims_markdown as gp_claims_markdown

    res = read_json(path, "--gp-results", require=("runs",))
    runs = res["runs"]
    reps = len({r["rep"] for r in runs})
    return ["\n## GP regression (seed Table 3, Appendix E)\n",
            f"From `{res['setup'].get('command', 'energyformer reproduce cem-gp')}` ({reps} repetitions; full "
            f"table, the paper's numbers beside ours and the recursion-depth study: [gp.md](gp.md)).\n",
            gp_claims_markdown(runs)]


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


def _claims_section(agg: dict) -> list[str]:
    """The seed's claims with their declared rules (analysis.lm_claims) and where the noise comes from."""
    noise = agg["loss_noise"]
    if noise is None:
        head = ("Only one seed per run: no seed variation was measured, so no verdict can be decided "
                "(UNDECIDED) except where a bound is declared.")
        src = "none measured"
        value = None
    else:
        value, c, lr = noise
        others = ", ".join(f"{n} at {l:g}: {r:.3f}" for r, n, l in agg["loss_ranges"][1:])
        src = f"seed range of {c} at lr {lr:g}"
        head = (f"Declared noise of a validation loss: **{value:.3f} nats** ({math.exp(value):.2f}x perplexity), "
                f"the largest seed range (max − min) among the {len(agg['loss_ranges'])} (config, lr) pairs run "
                f"with two seeds ({c} at lr {lr:g}; the others: {others}). Most configs ran one seed, so this "
                f"is the only seed-to-seed variation measured here; a margin inside it is UNDECIDED.")
    return ["\n## The seed's claims on these runs\n",
            "Validation loss (seed mean; perplexity = exp of it). ~1M-parameter models trained for minutes: a "
            "claim that does not hold here is reported plainly, but is not evidence against the paper's "
            "86M-256M-parameter results. Verdicts by `energyformer.analysis.verdicts.compare`: the margin "
            "in the claim's favour against a band = max(the seeds' own spread, the declared noise).", "",
            head, "",
            claims_markdown(agg["loss_fixed"], agg["loss_opt"], agg["lr_opt"], value, src)]


def _at_lr_note(agg: dict) -> str:
    """Where the one-LR rate comes from: Llama's best grid rate (seed mean) or an explicit ``--at-lr``."""
    llama = agg["sweep"].get("llama")
    if not llama:
        return "."
    best = min(zip(llama["val_loss"], llama["lrs"]))[1]
    if best == agg["at_lr"]:
        return " (Llama's best rate of the sweep)."
    return (f" (set with --at-lr; on the seed mean Llama's best grid rate is {best:g}, where the suite "
            f"configs did not run).")


def write_report(records: list[dict], out: Path, report: Path | None = None,
                 title: str = "CEM language-model comparison", at_lr: float | None = None,
                 setup: str | None = None, gp_results: Path | None = None,
                 write_results: bool = True) -> tuple[list[dict], str]:
    """report.md (or ``report``), loss_curves.png, lr_sweep.png and (``write_results``) results.json;
    returns (rows, text)."""
    out.mkdir(parents=True, exist_ok=True)
    report = report or out / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if report.name == "report.md" else "lm_"
    agg = aggregate(records, at_lr)
    rows = agg["rows"]
    unigram = next((r["unigram_val_ppl"] for r in records if r.get("unigram_val_ppl")), None)
    fixed = [r for r in rows if r["at_fixed_lr"]]
    curves = plot_loss_curves({r["name"]: r["history"] for r in fixed if r["history"]},
                              report.parent / f"{prefix}loss_curves.png", f"{title} (lr {agg['at_lr']:g})",
                              {r["name"]: r["steps"] for r in fixed})
    steps = sorted({r["steps"] for r in records})
    tok = sorted({r.get("tokens_per_step", 0) for r in records})
    seeds = sorted({r["seed"] for r in records})
    text = [f"# {title}\n", f"{setup}\n" if setup else "",
            f"Runs: {len(records)} ({', '.join(map(str, steps))} steps of {', '.join(map(str, tok))} tokens; "
            f"precision {', '.join(sorted({r.get('precision', 'fp32') for r in records}))}; seeds "
            f"{', '.join(map(str, seeds))}). Table and one-LR claims at lr = {agg['at_lr']:g}"
            + _at_lr_note(agg),
            "", markdown_table(fixed or rows, unigram), f"\n![loss curves]({curves.name})\n",
            *_claims_section(agg)]
    if agg["sweep"]:
        plot = plot_lr_sweep(agg["sweep"], report.parent / f"{prefix}lr_sweep.png",
                             "validation loss vs learning rate (Akima, seed Fig. 3a)")
        text += ["\n## Learning-rate sweep (Akima interpolation over log2 lr, seed Fig. 3a)\n",
                 f"![lr sweep]({plot.name})\n",
                 "| run | learning rates | val loss (seed mean) | interpolated optimum lr | interpolated val ppl |",
                 "|---|---|---|---:|---:|"]
        for k, v in agg["sweep"].items():
            text.append(f"| {k} | {', '.join(f'{x:g}' for x in v['lrs'])} | "
                        f"{', '.join(f'{x:.3f}' for x in v['val_loss'])} | {v['akima_lr']:.2e} | "
                        f"{math.exp(v['akima_val_loss']):.2f} |")
    text += _readout_section(agg)
    text += _step_size_section(agg)
    if gp_results is not None:
        text += gp_section(gp_results)
    body = "\n".join(text) + "\n"
    report.write_text(body)
    if write_results:
        results = {"runs": records, "at_lr": agg["at_lr"], "lr_sweep": agg["sweep"], "noise": agg["noise"],
                   "unigram_val_ppl": unigram, "setup": setup}
        (out / "results.json").write_text(json.dumps(results, indent=1))
    return rows, body


def render_page_dir(out: Path) -> list[Path]:
    """The page contract (issue 22): re-render the CEM results folder ``out`` from the artifacts committed
    in it — README.md (+ lm_*.png) from ``lm_results.json`` (and the GP section from ``gp_results.json``),
    and the GP pages (gp.md, gp_findings.md, gp_recursion.png) from ``gp_results.json``. Reads nothing
    outside ``out``; trains nothing. Returns the pages written."""
    from ..analysis.gp_claims import render_gp_pages

    written = []
    lm = out / "lm_results.json"
    gp = out / "gp_results.json"
    if lm.exists():
        saved = read_json(lm, "lm_results.json", require=("runs",))
        write_report(saved["runs"], out, out / "README.md", at_lr=saved.get("at_lr"), setup=saved.get("setup"),
                     gp_results=gp if gp.exists() else None, write_results=False)
        written.append(out / "README.md")
    if gp.exists():
        written += render_gp_pages(read_json(gp, "gp_results.json", require=("runs",)), out)
    if not written:
        raise FileNotFoundError(f"{out}: no lm_results.json or gp_results.json to render a page from")
    return written


def load_records(sources: list[Path]) -> list[dict]:
    """Run records from output folders (their results.json or the runs' summary.json) or results.json files."""
    records: dict[str, dict] = {}
    for s in sources:
        files = [s] if s.is_file() else ([s / "results.json"] if (s / "results.json").exists() else [])
        for f in files:
            for r in read_json(f, "results file", require=("runs",))["runs"]:
                records[r["run_dir"]] = r
        if s.is_dir():
            for f in sorted(s.glob("*/summary.json")):
                r = read_json(f, "run summary", require=("run_dir",))
                records[r["run_dir"]] = r
        if not files and not (s.is_dir() and any(s.glob("*/summary.json"))):
            raise FileNotFoundError(f"{s}: no results.json or run summaries (--from takes output folders "
                                    f"of earlier runs or results.json files)")
    return list(records.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="energyformer reproduce cem-lm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="drop-in", choices=sorted(SUITES),
                   help="named subset of configs (default: drop-in, seed §4.1)")
    p.add_argument("--configs", nargs="+", help="explicit config names instead of a suite (e.g. lm/llama)")
    p.add_argument("--steps", type=count, help="override train.steps for every run")
    p.add_argument("--lr-sweep", type=lambda s: [float(x) for x in s.split(",")],
                   help="comma-separated learning rates, e.g. 5e-4,1e-3,2e-3,4e-3,8e-3 (the seed's)")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0],
                   help="comma-separated training seeds (default 0)")
    p.add_argument("--at-lr", type=positive_float, help="learning rate of the one-LR claims (default: Llama's best)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override applied to every run (repeatable)")
    p.add_argument("--out", type=writable_dir("--out"), default="runs/reproduce-cem-lm", help="output directory (run directories)")
    p.add_argument("--report", type=writable_file("--report", as_path=True), help="write the report here (default OUT/report.md); its plots "
                   "go beside it, and a copy of results.json as lm_results.json")
    p.add_argument("--overwrite", action="store_true", help="train again runs already in the output directory")
    p.add_argument("--gp-results", type=Path, help="gp_results.json of `reproduce cem-gp --report`: add its verdicts")
    p.add_argument("--setup", help="a paragraph (markdown), or a file holding it, describing how the runs were "
                   "made, put under the title (kept in results.json)")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: rebuild the report from the --from folders / results.json files")
    p.add_argument("--from", dest="sources", nargs="+", type=Path, default=[],
                   help="with --report-only: output folders of earlier runs or results.json files (default: --out)")
    a = p.parse_args(argv)
    if a.sources and not a.report_only:
        p.error("--from only applies with --report-only (it names earlier results to re-render; "
                "without --report-only this command trains the suite)")
    out = Path(a.out)
    if a.report_only and not a.sources and a.report is None and not (out / "results.json").exists() \
            and not any(out.glob("*/summary.json")):
        # a committed results folder (docs/results/cem): re-render its pages from its artifacts
        for page in render_page_dir(out):
            print(f"wrote {page}")
        return 0
    title = "CEM language-model comparison"
    setup = a.setup
    if setup is not None and Path(setup).is_file():
        setup = Path(setup).read_text().strip()
    if a.report_only:
        records = load_records(a.sources or [out])
        # a results.json keeps the setup paragraph it was written with, so the page regenerates unchanged
        for s in a.sources:
            if s.is_file():
                saved = json.loads(s.read_text())
                setup = saved.get("setup") if setup is None else setup
                a.at_lr = saved.get("at_lr") if a.at_lr is None else a.at_lr
    else:
        configs = a.configs or SUITES[a.suite]
        overrides = list(a.overrides) + ([f"train.steps={a.steps}"] if a.steps else [])
        new = [run_one(n, out, overrides, lr, s, a.overwrite)
               for n in configs for lr in (a.lr_sweep or [None]) for s in a.seeds]
        # the report covers every finished run in --out (earlier invocations included)
        records = list({r["run_dir"]: r for r in load_records([out]) + new}.values())
    _, text = write_report(records, out, a.report, title, a.at_lr, setup, a.gp_results)
    if a.report is not None:
        shutil.copyfile(out / "results.json", a.report.parent / "lm_results.json")
    print("\n" + text)
    print(f"\nwrote {a.report or out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
