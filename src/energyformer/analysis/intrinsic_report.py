"""Page of the ``intrinsic-lm`` study (seed 001 §4, Fig. 1): convergence table, validation-loss curves.

The seed's claim is about **convergence speed** (numbers not recoverable from the text), so every run is
summarised by its validation loss at 10 / 25 / 50 / 100 % of the token budget (:func:`val_loss`, the
study's metric hook) and by the tokens it needs to reach a target loss. The target is *measured*, never
fixed: the MHA baseline's final validation loss on that corpus (mean over seeds). The claims (a)-(e) are
declared with their rules in ``studies/intrinsic-lm.yaml`` and decided by ``energyformer.studies.claims``;
:func:`render` lays out the page from the committed records. :func:`scale_verdict` says in one sentence
whether the run can tell the variants apart at all: the spread of their final losses against the
seed-to-seed range.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from .figures import save_figure

#: budget fractions at which losses are reported (seed: convergence speed)
POINTS = (0.10, 0.25, 0.50, 1.00)
#: seeds a variant needs before its spread counts as a noise estimate
MIN_SEEDS = 2
#: the seed's training tokens: 1M samples x 256 tokens x 3 epochs (App. A.8)
SEED_TOKENS = 1_000_000 * 256 * 3
SEED_VARIANTS = ["mha", "momen_mha", "nag_mha", "mha2nd1st", "mha2nd1st_simple", "mha2nd_lite"]
EXTRA_VARIANTS = ["mha_tied", "linear_attn", "mha2nd"]
VARIANT_NAMES = {
    "mha": "MHA", "momen_mha": "MomenMHA", "nag_mha": "NagMHA", "mha2nd1st": "MHA2nd1st",
    "mha2nd1st_simple": "MHA2nd1st-simplified", "mha2nd_lite": "MHA2nd-lite", "mha_tied": "tied MHA (GD on F_MH)",
    "linear_attn": "linear attention", "mha2nd": "MHA2nd (exact Newton)",
}


def eval_history(run_dir: Path) -> list[tuple[int, float]]:
    """(step, validation loss) of every evaluation in a run's metrics.jsonl."""
    out = []
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == "eval":
            loss = rec.get("eval/loss", rec.get("loss"))
            if loss is not None:
                out.append((int(rec["step"]), float(loss)))
    return out


def loss_at(hist: list[tuple[int, float]], step: float) -> float:
    """Validation loss at ``step``, linearly interpolated between evaluations (NaN before the first)."""
    steps = np.array([s for s, _ in hist], float)
    losses = np.array([v for _, v in hist], float)
    if not len(steps) or step < steps[0] - 1e-9:
        return float("nan")
    return float(np.interp(step, steps, losses))


def steps_to_reach(hist: list[tuple[int, float]], target: float) -> float:
    """First (interpolated) step at which the validation loss is ≤ target; inf if never."""
    prev = None
    for s, v in hist:
        if v <= target:
            if prev is None or prev[1] == v:
                return float(s)
            s0, v0 = prev
            return s0 + (v0 - target) / (v0 - v) * (s - s0)
        prev = (s, v)
    return float("inf")


def summarise(runs: dict[str, list[dict]], total_steps: int, tokens_per_step: int) -> dict:
    """Per variant: losses at POINTS per seed, tokens to reach the MHA target per seed, tokens/s."""
    base = runs.get("mha", [])
    target = float(np.mean([r["history"][-1][1] for r in base])) if base else float("nan")
    out = {"target_loss": target, "variants": {}}
    for name, rs in runs.items():
        pts = {p: [loss_at(r["history"], p * total_steps) for r in rs] for p in POINTS}
        reach = [steps_to_reach(r["history"], target) * tokens_per_step for r in rs]
        out["variants"][name] = {
            "seeds": [r["seed"] for r in rs], "losses": {str(p): v for p, v in pts.items()},
            "tokens_to_target": reach, "params": rs[0]["params"],
            "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in rs])),
        }
    return out


def _fmt_tokens(t: float) -> str:
    if not math.isfinite(t):
        return "not reached"
    return f"{t / 1e6:.2f}M" if t >= 1e6 else f"{t / 1e3:.0f}K"


def _p(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def table(s: dict, total_tokens: int) -> str:
    head = ("| variant | attention params | MLP params | total params | " +
            " | ".join(f"val loss @{int(p * 100)}%" for p in POINTS) +
            " | tokens to reach target (per seed) | tokens/s |")
    lines = [head, "|---|---:|---:|---:|" + "---:|" * len(POINTS) + "---|---:|"]
    for name, r in s["variants"].items():
        cells = []
        for p in POINTS:
            xs = r["losses"][str(p)]
            cells.append(f"{np.mean(xs):.3f} ± {(max(xs) - min(xs)) / 2:.3f}")
        reach = ", ".join(_fmt_tokens(t) for t in r["tokens_to_target"])
        pp = r["params"]
        lines.append(f"| {VARIANT_NAMES.get(name, name)} | {_p(pp['attention'])} | {_p(pp['mlp'])} | "
                     f"{_p(pp['total'])} | " + " | ".join(cells) + f" | {reach} | {r['tokens_per_s']:.0f} |")
    lines.append(f"\nLoss: mean ± half the range over seeds (nats/token). Target = MHA's final validation loss "
                 f"(mean over seeds) = {s['target_loss']:.3f}; budget {_fmt_tokens(total_tokens)} tokens. "
                 "tokens/s: whole run incl. evaluation.")
    return "\n".join(lines)


def scale_verdict(s: dict) -> str:
    """One sentence: do the variants' final losses differ by more than the seed-to-seed range?

    Spread = max − min over variants of the mean final loss; noise = the largest final-loss range over
    the seeds of any variant run with ≥ MIN_SEEDS seeds. Spread ≤ 2 × noise (or no noise estimate at
    all) means the run cannot tell the variants apart — said plainly rather than read as a result.
    """
    v = s["variants"]
    finals = {n: list(r["losses"]["1.0"]) for n, r in v.items()}
    means = {n: float(np.mean(x)) for n, x in finals.items()}
    spread = max(means.values()) - min(means.values())
    multi = {n: max(x) - min(x) for n, x in finals.items() if len(x) >= MIN_SEEDS}
    lo, hi = min(means, key=means.get), max(means, key=means.get)
    head = (f"The mean final losses of the {len(v)} variants span {spread:.3f} nats "
            f"({VARIANT_NAMES.get(lo, lo)} {means[lo]:.3f} to {VARIANT_NAMES.get(hi, hi)} {means[hi]:.3f})")
    if not multi:
        return head + "; no variant was run with 2 seeds, so there is no noise estimate: this run cannot tell the variants apart."
    worst = max(multi, key=multi.get)
    noise = (f"the largest seed-to-seed range is {multi[worst]:.3f} nats ({VARIANT_NAMES.get(worst, worst)}, "
             f"{len(finals[worst])} seeds; {len(multi)} of {len(v)} variants have ≥ {MIN_SEEDS} seeds)")
    if spread <= 2 * multi[worst]:
        return f"{head}, within twice the seed noise: {noise}. At this scale the run cannot tell the variants apart."
    return f"{head}, more than twice the seed noise: {noise}. The run separates at least the extreme variants."


def plot_curves(per_corpus: dict[str, dict[str, list[dict]]], tokens_per_step: int, path: Path) -> Path:
    """Validation loss vs tokens, mean over seeds with the seed range shaded; one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(per_corpus), figsize=(6.5 * len(per_corpus), 4.3), squeeze=False)
    for ax, (corpus, runs) in zip(axes[0], per_corpus.items()):
        for name, rs in runs.items():
            steps = [s for s, _ in rs[0]["history"]]
            ys = np.array([[loss_at(r["history"], st) for st in steps] for r in rs])
            x = np.array(steps) * tokens_per_step / 1e6
            line, = ax.plot(x, ys.mean(0), label=VARIANT_NAMES.get(name, name), lw=2 if name == "mha" else 1.3)
            ax.fill_between(x, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.15)
        ax.set_xlabel("training tokens (M)")
        ax.set_ylabel("validation loss (nats/token)")
        ax.set_title(corpus)
        ax.grid(alpha=0.3)
        lo = min(min(v for _, v in r["history"]) for rs in runs.values() for r in rs)
        hi = max(rs[0]["history"][min(1, len(rs[0]["history"]) - 1)][1] for rs in runs.values())
        ax.set_ylim(lo - 0.05, hi + 0.05)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


# ----------------------------------------------------------------------------- study hooks
def history_points(hist: list[tuple[int, float]], total_steps: int) -> dict:
    """The ``val_loss`` record of one run: its (step, loss) history and the loss at each budget point."""
    out = {"history": [[int(s), float(v)] for s, v in hist]}
    for p in POINTS:   # None (not NaN, which is not JSON) before the first evaluation
        v = loss_at(hist, p * total_steps)
        out[f"at_{int(p * 100)}"] = v if math.isfinite(v) else None
    out["final"] = out.pop("at_100")
    return out


def val_loss(run) -> dict:
    """Metric hook of the study: validation-loss history and the loss at 10/25/50/100 % of the budget."""
    return history_points(eval_history(run.run_dir), run.config.train.steps)


def depth_trace(run) -> dict | None:
    """Metric hook: :func:`intrinsic_traces.depth_traces` of the trained model on 4 validation sequences
    (None for an attention that is not an intrinsic kind)."""
    from .intrinsic_traces import depth_traces

    _, model, task = run.trained()
    x, _ = next(iter(task.windows("validation")))
    try:
        return depth_traces(model, x[:4].to(next(model.parameters()).device))
    except TypeError:
        return None


def _legacy(rec: dict) -> dict:
    """A study record in the shape the tables and plots read."""
    t = rec["resolved"]["task"]
    return {"corpus": rec["cell"]["corpus"], "variant": rec["cell"]["variant"], "seed": rec["seed"],
            "params": rec["params"], "history": [tuple(h) for h in rec["metrics"]["val_loss"]["history"]],
            "tokens_per_s": rec["tokens_per_s"], "seconds": rec["seconds"], "steps": rec["steps"],
            "tokens_per_step": rec.get("tokens_per_step", t["batch_size"] * t["seq_len"]),
            "model": rec["resolved"]["model"], "train": rec["resolved"]["train"],
            "hardware": rec.get("hardware", "unrecorded hardware")}


def by_corpus(runs: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{corpus: {variant: [runs by seed]}}, MHA first, then the seed's order."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in runs:
        out.setdefault(r["corpus"], {}).setdefault(r["variant"], []).append(r)
    order = SEED_VARIANTS + EXTRA_VARIANTS
    return {c: {k: sorted(v[k], key=lambda r: r["seed"])
                for k in sorted(v, key=lambda k: order.index(k) if k in order else len(order))}
            for c, v in out.items()}


def readout_note(runs: list[dict]) -> str:
    """A 'What ran' line for NagMHA runs whose read-out is not the seed's recursion (issue 23: the
    default before it, then named 'lookahead', evaluated sublayer l+1 at x_l + η_l β_l m_l)."""
    from ..blocks.intrinsic import LEGACY_READOUTS

    def readout(run: dict) -> str | None:  # as recorded in the run's model config (None: not recorded)
        att = run.get("model", {}).get("block", {}).get("attention")
        r = att.get("readout") if isinstance(att, dict) else None
        return LEGACY_READOUTS.get(r, r)

    old = [r for r in runs if r["variant"] == "nag_mha" and readout(r) not in (None, "seed")]
    if not old:
        return ""
    return (f"* **NagMHA read-out:** {len(old)} NagMHA run(s) here used `readout: sgd_lookahead` (the default "
            "before issue 23, then named `lookahead`): sublayer l+1 is evaluated at x_l + η_l β_l m_l, with the "
            "previous sublayer's learned η, β, not at the seed's x_l + η_{l+1} β_{l+1} m_l (today's default "
            "`readout: seed`). With per-sublayer learned β, η that is a different model; its rows and claims "
            "(a), (b) are for that variant. Not rerun: `energyformer reproduce intrinsic-lm --only variant=nag_mha` "
            "retrains them with the seed's read-out (their recorded config no longer matches).")


def render(out: Path, study, name: str, scale: str, data: dict, rows: list) -> str:
    """The scale page ``out/README.md`` (+ ``val_loss.png``, ``depth_traces.png``) from the records."""
    from ..studies.claims import claims_table

    recs = list(data["runs"].values())
    runs = [_legacy(r) for r in recs]
    groups = by_corpus(runs)
    r0 = runs[0]
    steps, tps = r0["steps"], r0["tokens_per_step"]
    m, t, P = r0["model"], r0["train"], r0["params"]
    seeds = sorted({r["seed"] for r in runs})
    counts = {(c, v): len(rs) for c, g in groups.items() for v, rs in g.items()}
    uneven = "" if len(set(counts.values())) == 1 else " (not every variant ran every seed: " + ", ".join(
        f"{c}/{VARIANT_NAMES.get(v, v)} {n}" for (c, v), n in counts.items()) + " seed(s))"
    secs = sum(r["seconds"] for r in runs)
    hw = "; ".join(sorted({r["hardware"] for r in runs}))
    overrides = sorted({" ".join(o for o in rec["overrides"] if not o.startswith(("name=", "train.seed=", "task.corpus=")))
                        for rec in recs})
    lines = [f"# {study.title} — {scale} scale\n",
             f"Rendered from this folder's `results.json` by `energyformer reproduce {name} --report-only --out "
             f"{study.page}` (study `studies/{name}.yaml`; the runs: `energyformer reproduce {name} --scale {scale}`, "
             f"recorded with the overrides `{' | '.join(overrides)}`).\n",
             "## What ran\n",
             f"* GPT backbone (pre-LN, learned positions, GELU MLP 4x, dropout {m['block']['dropout']}): width "
             f"{m['dim']}, {m['n_layers']} layers, {m['heads']} heads (head dim {m['dim'] // m['heads']}), "
             f"context {m['max_seq_len']}, GPT-2 BPE (vocabulary 50257, embedding tied to the head).",
             f"* AdamW (lr {t['lr']}, betas {t['optimizer'].get('betas')}, weight decay "
             f"{t['optimizer'].get('weight_decay')}), schedule {t['schedule']['kind']} "
             f"(warm-up {t['schedule'].get('warmup')}), {steps} steps x {tps} tokens = {steps * tps / 1e6:.2f}M "
             f"tokens per run; seeds {seeds}{uneven}; every variant sees the same batches for a given seed.",
             f"* {len(runs)} runs, {secs / 60:.1f} min of training in total on {hw}."
             + (f" {data['note']}" if data.get("note") else ""),
             *([readout_note(runs)] if readout_note(runs) else []),
             f"* The seed: 30M-160M parameters, MiniPile, 1M samples x 3 epochs (~{SEED_TOKENS / 1e9:.1f}B tokens at "
             f"context 256). Here: {P['total'] / 1e6:.1f}M parameters ({100 * P['embedding'] / P['total']:.0f}% of "
             f"them the GPT-2 embedding) and {steps * tps / 1e6:.2f}M tokens per run "
             f"({100 * steps * tps / SEED_TOKENS:.2f}% of the seed's): only the *direction* of the seed's claims "
             "can be checked, early in training.",
             "* The paper's side: seed §4 states its results only as validation-loss curves (Fig. 1, models of "
             "30M, 77M and 160M parameters) and five qualitative claims; no number is given in the text, so each "
             "claim is set against ours. Each claim's rule is declared in the study file and shown beside its "
             "verdict (A and B: mean [min, max] over seeds).\n"]
    for corpus, g in groups.items():
        s = summarise(g, steps, tps)
        mine = [r for r in rows if r.label in (None, corpus)]
        lines += [f"## {corpus}\n", table(s, steps * tps), "", claims_table(mine), "",
                  f"**Can this run tell the variants apart?** {scale_verdict(s)}\n"]
    plot = plot_curves(groups, tps, out / "val_loss.png")
    lines.append(f"![validation loss]({plot.name})\n")
    traces = {rec["cell"]["variant"]: rec["metrics"]["depth_trace"] for rec in recs
              if rec["seed"] == seeds[0] and rec["cell"]["corpus"] == next(iter(groups))
              and rec["metrics"].get("depth_trace") and rec["cell"]["variant"] in ("mha", "momen_mha", "nag_mha")}
    if traces or (out / "depth_traces.png").exists():
        if traces:
            from .intrinsic_traces import plot_depth_traces

            plot_depth_traces(traces, out / "depth_traces.png", labels=VARIANT_NAMES)
        lines.append("## Layer = optimiser iteration\n\n![depth traces](depth_traces.png)\n")
        lines.append("Per layer of a trained model (seed 0, first corpus, a validation batch): the attention "
                     "sublayer's free energy (hypersphere form of its own query/key subspaces, mean over tokens) "
                     "at the stream before the attention sublayer, after it and after the FFN; and the norm "
                     "of the carried velocity m after each sublayer (momentum variants)."
                     + ("" if traces else " The figure was drawn from the run directories when these runs were "
                        "trained; its numbers are not in results.json, so it is kept as committed.") + "\n")
    if (out / "benchmark.md").exists():
        lines.append("## Step-time benchmark on the same machine\n\nSee [benchmark.md](benchmark.md) "
                     "(`benchmarks/intrinsic_attention.py`, its committed output).\n")
    text = "\n".join(lines)
    (out / "README.md").write_text(text + "\n")
    return text
