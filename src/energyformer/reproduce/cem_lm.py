"""``energyformer reproduce cem-lm``: the CEM seed's language-model comparisons at CPU scale (§4.1-4.4).

Runs a chosen subset of ``configs/lm/*.yaml`` with one step budget, then writes ``report.md``
(parameters by part, validation perplexity, bits per byte, tokens/s, the unigram baseline),
``results.json`` and ``loss_curves.png``. With ``--lr-sweep`` each config is trained at several
learning rates and the optimum is located by Akima interpolation (seed Fig. 3a).

The seed trains 86M-256M-parameter models on SlimPajama for billions of tokens; we train ~1M-parameter
models on Shakespeare for minutes, so only the *direction* of the seed's claims can be checked. The
report says which claims our numbers support and which they do not.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from ..analysis.lm_claims import claims_markdown
from ..analysis.lm_report import akima_optimum, markdown_table, plot_loss_curves, write_results
from ..data.text import unigram_perplexity
from ..experiment import RunResult, load_run_config, run_experiment

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
}


def _kind(sub) -> str:
    return getattr(sub, "kind", sub)


def _row(res: RunResult) -> dict:
    return {"name": res.name, "params": res.params, "val_ppl": res.final.get("eval/ppl", float("nan")),
            "val_bpb": res.final.get("eval/bpb", float("nan")), "val_loss": res.final.get("eval/loss"),
            "tokens_per_s": res.tokens_per_s, "seconds": res.seconds, "run_dir": str(res.run_dir)}


def run_suite(configs: list[str], out: Path, overrides: list[str], lr_sweep: list[float] | None = None,
              title: str = "CEM language-model comparison", overwrite: bool = False) -> tuple[list[dict], str]:
    """Train every config (at every swept LR), then write the report; returns (rows, report text)."""
    rows, histories, sweep = [], {}, {}
    unigram = None
    for name in configs:
        stem = Path(name).name
        lrs = lr_sweep or [None]
        results = []
        for lr in lrs:
            ov = list(overrides) + [f"out_dir={out}", f"name={stem}" + (f"_lr{lr:g}" if lr else "")]
            if lr:
                ov.append(f"train.lr={lr}")
            cfg = load_run_config(name, ov)
            print(f"== {cfg.name}: {_kind(cfg.model.block.attention)} attention + {_kind(cfg.model.block.mlp)} MLP, "
                  f"{cfg.train.steps} steps", flush=True)
            res = run_experiment(cfg, overwrite=overwrite)
            results.append((lr, res))
            if unigram is None:
                t = res.task
                unigram = unigram_perplexity(t.train_ids, t.windows("validation").data, t.vocab_size)
        if lr_sweep:
            losses = [r.final.get("eval/loss", float("nan")) for _, r in results]
            lr_opt, loss_opt = akima_optimum(lr_sweep, losses)
            sweep[stem] = {"lrs": lr_sweep, "val_loss": losses, "akima_lr": lr_opt, "akima_val_loss": loss_opt}
        best = min(results, key=lambda t: t[1].final.get("eval/loss", float("inf")))[1]
        rows.append(_row(best) | {"name": stem})
        histories[stem] = best.loss_history
    text = write_report(out, rows, histories, unigram, sweep, title)
    return rows, text


def write_report(out: Path, rows: list[dict], histories: dict[str, list[float]], unigram: float | None,
                 sweep: dict, title: str = "CEM language-model comparison") -> str:
    """report.md (table, claims, LR sweep), loss_curves.png and results.json in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, unigram)
    plot = plot_loss_curves(histories, out / "loss_curves.png", title)
    ppl = {r["name"]: r["val_ppl"] for r in rows}
    if sweep:  # interpolated optimum per run, as the seed compares at each model's optimal LR
        ppl |= {k: math.exp(v["akima_val_loss"]) for k, v in sweep.items()}
    report = [f"# {title}\n", table, f"\n![loss curves]({plot.name})\n",
              "\n## The seed's claims on these runs\n",
              "Checked automatically on validation perplexity" + (" (Akima-interpolated optimum per run)"
                                                                  if sweep else " at each config's learning rate")
              + ". ~1M-parameter models trained for minutes: a claim that does not hold here is reported "
              "plainly, but is not evidence against the paper's 86M-256M-parameter results.\n",
              claims_markdown(ppl)]
    if sweep:
        report.append("\n## Learning-rate sweep (Akima interpolation over log2 lr, seed Fig. 3a)\n")
        report.append("| run | learning rates | val loss | interpolated optimum lr | interpolated val ppl |")
        report.append("|---|---|---|---:|---:|")
        for k, v in sweep.items():
            report.append(f"| {k} | {', '.join(f'{x:g}' for x in v['lrs'])} | "
                          f"{', '.join(f'{x:.3f}' for x in v['val_loss'])} | {v['akima_lr']:.2e} | "
                          f"{math.exp(v['akima_val_loss']):.2f} |")
    text = "\n".join(report)
    (out / "report.md").write_text(text + "\n")
    write_results(out, rows, {"unigram_val_ppl": unigram, "lr_sweep": sweep})
    return text


def _history(run_dir: Path) -> list[float]:
    hist = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event", "train") == "train" and "loss" in rec:
            hist.append(rec["loss"])
    return hist


def report_from(dirs: list[Path], out: Path, title: str) -> str:
    """Rebuild one report from the results.json of finished suites (e.g. runs made separately)."""
    rows, sweep, unigram = [], {}, None
    for d in dirs:
        res_path = d / "results.json"
        if not res_path.exists():
            raise FileNotFoundError(f"{res_path} not found: --from takes output folders of earlier runs")
        res = json.loads(res_path.read_text())
        rows += [r for r in res["runs"] if r["name"] not in {x["name"] for x in rows}]
        sweep |= res.get("lr_sweep") or {}
        unigram = unigram or res.get("unigram_val_ppl")
    histories = {r["name"]: _history(Path(r["run_dir"])) for r in rows}
    return write_report(out, rows, histories, unigram, sweep, title)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="energyformer reproduce cem-lm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="drop-in", choices=sorted(SUITES),
                   help="named subset of configs (default: drop-in, seed §4.1)")
    p.add_argument("--configs", nargs="+", help="explicit config names instead of a suite (e.g. lm/llama)")
    p.add_argument("--steps", type=int, help="override train.steps for every run")
    p.add_argument("--lr-sweep", type=lambda s: [float(x) for x in s.split(",")],
                   help="comma-separated learning rates, e.g. 5e-4,1e-3,2e-3,4e-3,8e-3")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override applied to every run (repeatable)")
    p.add_argument("--out", default="runs/reproduce-cem-lm", help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace runs already in the output directory")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: rebuild report.md from the results.json of the --from folders")
    p.add_argument("--from", dest="sources", nargs="+", type=Path, default=[],
                   help="with --report-only: output folders of earlier runs (default: --out)")
    a = p.parse_args(argv)
    if a.report_only:
        text = report_from(a.sources or [Path(a.out)], Path(a.out), "CEM language-model comparison")
        print(text)
        print(f"\nwrote {Path(a.out) / 'report.md'}")
        return 0
    configs = a.configs or SUITES[a.suite]
    overrides = list(a.overrides) + ([f"train.steps={a.steps}"] if a.steps else [])
    _, text = run_suite(configs, Path(a.out), overrides, a.lr_sweep, overwrite=a.overwrite)
    print("\n" + text)
    print(f"\nwrote {Path(a.out) / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
