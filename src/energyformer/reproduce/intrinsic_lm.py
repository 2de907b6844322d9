"""``energyformer reproduce intrinsic-lm``: the intrinsic-optimizer seed's LM comparison (seed 001 §4,
App. A.8) — MHA vs MomenMHA, NagMHA, MHA2nd1st, its simplified form and MHA2nd-lite in a GPT
backbone, same seed and token budget, on Shakespeare and on the Python documentation.

Each variant is ``configs/intrinsic/<variant>.yaml`` (equal width and depth, GPT-2 BPE, context 256,
AdamW with warm-up and linear decay, dropout 0.1); every run is repeated for each ``--seeds`` value
(≥ 2, so a difference can be told from noise) and each ``--corpora`` value. Output in ``--out``:
``README.md`` (what ran, tables of loss at 10/25/50/100 % of the budget and tokens to reach the MHA
baseline's final loss, the seed's claims checked as HOLDS / DOES NOT HOLD), ``val_loss.png``,
``depth_traces.png`` (free energy before/after every sublayer and the momentum norm across depth,
:mod:`energyformer.analysis.intrinsic_traces`) and ``results.json``. Finished runs are recorded in
``results.json`` as they end, so an interrupted reproduction continues where it stopped.

The seed trains 30M-160M-parameter models on MiniPile (1M samples, 3 epochs, two GPUs); the CPU
scale here is ~1000x smaller in parameters and far smaller in tokens. A claim that does not hold
here is reported plainly, and is not evidence against the paper at its scale.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from ..utils.cliargs import count, nonneg_int
from ..utils.paths import writable_dir
from ..analysis.intrinsic_report import (
    VARIANT_NAMES, claims_table, eval_history, plot_curves, scale_verdict, summarise, table,
)
from ..experiment import load_run_config, run_experiment

#: the seed's Fig. 1 variants (MHA2nd is the slow reference and is left out, as in the seed)
SEED_VARIANTS = ["mha", "momen_mha", "nag_mha", "mha2nd1st", "mha2nd1st_simple", "mha2nd_lite"]
EXTRA_VARIANTS = ["mha_tied", "linear_attn", "mha2nd"]
CORPORA = ["shakespeare", "pydoc"]
#: the seed's training tokens: 1M samples x 256 tokens x 3 epochs (App. A.8)
SEED_TOKENS = 1_000_000 * 256 * 3


def run_name(corpus: str, variant: str, seed: int) -> str:
    return f"{corpus}-{variant}-s{seed}"


def _hardware() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} GPU, torch {torch.__version__}"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def _save(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def run_all(variants: list[str], corpora: list[str], seeds: list[int], out: Path, overrides: list[str]) -> dict:
    """Train every (seed, corpus, variant) not yet in ``out/results.json``; returns the results."""
    out.mkdir(parents=True, exist_ok=True)
    res_path = out / "results.json"
    data = _load(res_path)
    data.setdefault("overrides", overrides)
    for seed in seeds:
        for corpus in corpora:
            for variant in variants:
                name = run_name(corpus, variant, seed)
                if name in data["runs"]:
                    continue
                cfg = load_run_config(f"intrinsic/{variant}", list(overrides) + [
                    f"task.corpus={corpus}", f"train.seed={seed}", f"name={name}", f"out_dir={out / 'runs'}"])
                print(f"== {name}: {cfg.train.steps} steps x {cfg.task.batch_size} x {cfg.task.seq_len} tokens",
                      flush=True)
                r = run_experiment(cfg, overwrite=True)
                data["runs"][name] = {
                    "corpus": corpus, "variant": variant, "seed": seed, "params": r.params,
                    "history": eval_history(r.run_dir), "tokens_per_s": r.tokens_per_s, "seconds": r.seconds,
                    "steps": cfg.train.steps, "tokens_per_step": cfg.task.batch_size * cfg.task.seq_len,
                    "run_dir": str(r.run_dir), "model": cfg.model.model_dump(mode="json"),
                    "train": cfg.train.model_dump(mode="json"), "hardware": _hardware(),
                }
                _save(res_path, data)
    return data


def by_corpus(data: dict) -> dict[str, dict[str, list[dict]]]:
    out: dict[str, dict[str, list[dict]]] = {}
    for r in data["runs"].values():
        out.setdefault(r["corpus"], {}).setdefault(r["variant"], []).append(r)
    for runs in out.values():  # MHA first, then the seed's order
        order = SEED_VARIANTS + EXTRA_VARIANTS
        for k in list(runs):
            runs[k] = sorted(runs[k], key=lambda r: r["seed"])
        keys = sorted(runs, key=lambda k: order.index(k) if k in order else len(order))
        runs_sorted = {k: runs[k] for k in keys}
        runs.clear()
        runs.update(runs_sorted)
    return out


def readout_note(data: dict) -> str:
    """A 'What ran' line for NagMHA runs whose read-out is not the seed's recursion (issue 23: the
    default before it, then named 'lookahead', evaluated sublayer l+1 at x_l + η_l β_l m_l)."""
    from ..blocks.intrinsic import LEGACY_READOUTS

    def readout(run: dict) -> str | None:  # as recorded in the run's model config (None: not recorded)
        att = run.get("model", {}).get("block", {}).get("attention")
        r = att.get("readout") if isinstance(att, dict) else None
        return LEGACY_READOUTS.get(r, r)

    old = sorted(name for name, r in data["runs"].items()
                 if r["variant"] == "nag_mha" and readout(r) not in (None, "seed"))
    if not old:
        return ""
    return (f"* **NagMHA read-out:** {len(old)} NagMHA run(s) here used `readout: sgd_lookahead` (the default "
            "before issue 23, then named `lookahead`): sublayer l+1 is evaluated at x_l + η_l β_l m_l, with the "
            "previous sublayer's learned η, β, not at the seed's x_l + η_{l+1} β_{l+1} m_l (today's default "
            "`readout: seed`). With per-sublayer learned β, η that is a different model; its rows and claims "
            "(a), (b) are for that variant. Not rerun (the session that fixed it had no GPU and the CPU runs are not cheap on the shared machine); "
            "`energyformer reproduce intrinsic-lm --variants nag_mha` after removing these runs from "
            "results.json reruns them with the seed's read-out.")


def write_report(data: dict, out: Path, traces: Path | None = None, note: str = "") -> str:
    groups = by_corpus(data)
    any_run = next(iter(data["runs"].values()))
    steps, tps = any_run["steps"], any_run["tokens_per_step"]
    m, t, P = any_run["model"], any_run["train"], any_run["params"]
    seeds = sorted({r["seed"] for r in data["runs"].values()})
    counts = {(c, v): len(rs) for c, runs in groups.items() for v, rs in runs.items()}
    uneven = "" if len(set(counts.values())) == 1 else " (not every variant ran every seed: " + ", ".join(
        f"{c}/{VARIANT_NAMES.get(v, v)} {n}" for (c, v), n in counts.items()) + " seed(s))"
    secs = sum(r["seconds"] for r in data["runs"].values())
    hw = next((r["hardware"] for r in data["runs"].values() if "hardware" in r), "unrecorded hardware")
    lines = ["# Intrinsic-optimizer attention: the LM comparison (seed 001 §4)\n",
             "Generated by `energyformer reproduce intrinsic-lm` "
             f"({' '.join(data.get('overrides', [])) or 'configs as committed'}).\n",
             "## What ran\n",
             f"* GPT backbone (pre-LN, learned positions, GELU MLP 4x, dropout {m['block']['dropout']}): width "
             f"{m['dim']}, {m['n_layers']} layers, {m['heads']} heads (head dim {m['dim'] // m['heads']}), "
             f"context {m['max_seq_len']}, GPT-2 BPE (vocabulary 50257, embedding tied to the head).",
             f"* AdamW (lr {t['lr']}, betas {t['optimizer'].get('betas')}, weight decay "
             f"{t['optimizer'].get('weight_decay')}), schedule {t['schedule']['kind']} "
             f"(warm-up {t['schedule'].get('warmup')}), {steps} steps x {tps} tokens = {steps * tps / 1e6:.2f}M "
             f"tokens per run; seeds {seeds}{uneven}; every variant sees the same batches for a given seed.",
             f"* {len(data['runs'])} runs, {secs / 60:.1f} min of training in total on "
             f"{hw}."
             + (f" {note}" if note else ""),
             *([readout_note(data)] if readout_note(data) else []),
             f"* The seed: 30M-160M parameters, MiniPile, 1M samples x 3 epochs (~{SEED_TOKENS / 1e9:.1f}B tokens at "
             f"context 256). Here: {P['total'] / 1e6:.1f}M parameters ({100 * P['embedding'] / P['total']:.0f}% of "
             f"them the GPT-2 embedding) and {steps * tps / 1e6:.2f}M tokens per run "
             f"({100 * steps * tps / SEED_TOKENS:.2f}% of the seed's): only the *direction* of the seed's claims "
             "can be checked, early in training.",
             "* The paper's side: seed §4 states its results only as validation-loss curves (Fig. 1, models of "
             "30M, 77M and 160M parameters) and the five qualitative claims checked below; no number is given "
             "in the text, so each claim is set against ours.\n"]
    for corpus, runs in groups.items():
        s = summarise(runs, steps, tps)
        lines += [f"## {corpus}\n", table(s, steps * tps), "", claims_table(s), "",
                  f"**Can this run tell the variants apart?** {scale_verdict(s)}\n"]
    plot = plot_curves(groups, tps, out / "val_loss.png")
    lines.append(f"![validation loss]({plot.name})\n")
    if traces is not None:
        lines.append(f"## Layer = optimiser iteration\n\n![depth traces]({traces.name})\n")
        lines.append("Per layer of a trained model (seed 0, first corpus, a validation batch): the attention "
                     "sublayer's free energy (hypersphere form of its own query/key subspaces, mean over tokens) "
                     "at the stream before the attention sublayer, after it and after the FFN; and the norm "
                     "of the carried velocity m after each sublayer (momentum variants).\n")
    text = "\n".join(lines)
    (out / "README.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="energyformer reproduce intrinsic-lm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=SEED_VARIANTS,
                   choices=SEED_VARIANTS + EXTRA_VARIANTS, help="configs/intrinsic/<variant>.yaml to run")
    p.add_argument("--corpora", nargs="+", default=CORPORA, choices=CORPORA)
    p.add_argument("--seeds", nargs="+", type=nonneg_int, default=[0, 1])
    p.add_argument("--steps", type=count, help="override train.steps of every run")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override applied to every run (repeatable)")
    p.add_argument("--out", type=writable_dir("--out"), default="runs/reproduce-intrinsic-lm", help="output directory")
    p.add_argument("--report-only", action="store_true", help="train nothing; rebuild the report")
    p.add_argument("--no-traces", action="store_true", help="skip the depth-trace figure")
    p.add_argument("--note", default="", help="a sentence added to 'What ran'")
    a = p.parse_args(argv)
    out = Path(a.out)
    if len(a.seeds) < 2:
        print("warning: one seed cannot tell a difference from noise; use --seeds 0 1 (or more)")
    overrides = list(a.overrides) + ([f"train.steps={a.steps}"] if a.steps else [])
    t0 = time.perf_counter()
    data = _load(out / "results.json") if a.report_only else run_all(a.variants, a.corpora, a.seeds, out, overrides)
    if not data["runs"]:
        raise SystemExit(f"no runs in {out / 'results.json'}")
    traces = None
    if not a.no_traces:
        from ..analysis.intrinsic_traces import plot_depth_traces

        dirs = {r["variant"]: Path(r["run_dir"]) for r in data["runs"].values()
                if r["seed"] == min(x["seed"] for x in data["runs"].values())
                and r["corpus"] == next(iter(by_corpus(data))) and r["variant"] in ("mha", "momen_mha", "nag_mha")}
        if dirs and all(d.exists() for d in dirs.values()):
            traces = plot_depth_traces(dirs, out / "depth_traces.png", labels=VARIANT_NAMES)
    text = write_report(data, out, traces, a.note)
    print(text)
    print(f"\nwrote {out / 'README.md'} ({time.perf_counter() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
