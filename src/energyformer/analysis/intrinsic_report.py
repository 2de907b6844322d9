"""Report of ``energyformer reproduce intrinsic-lm``: convergence table, claims, validation-loss curves.

The seed's claim is about **convergence speed** (seed 001 §4, Fig. 1; numbers not recoverable), so
every run is summarised by its validation loss at 10 / 25 / 50 / 100 % of the token budget and by
the tokens it needs to reach a target loss. The target is *measured*, never fixed: the MHA
baseline's final validation loss on that corpus (mean over seeds), i.e. "how much of the budget
does a variant need to match the baseline's end point".

Noise. Each variant is run with several seeds; a difference counts only when the seeds do not
overlap (:func:`separated`: every seed of one is below every seed of the other). Claims (per corpus):

(a) MomenMHA and NagMHA converge faster than MHA — each separated below MHA at ≥ 3 of the 4 points.
(b) NagMHA is the fastest — lowest mean loss at ≥ 3 of 4 points, separated from the runner-up there.
(c) MHA2nd1st consistently underperforms MHA — separated above MHA at all 4 points.
(d) the simplified form is worse still — separated above MHA2nd1st at ≥ 3 of 4 points.
(e) MHA2nd-lite is comparable to MHA — final |Δ| ≤ max(2 × the larger seed range, COMPARABLE × MHA's loss).

A claim involving a variant run with fewer than ``MIN_SEEDS`` seeds is reported as UNDECIDED (with what
the numbers alone would read). :func:`scale_verdict` says in one sentence whether the run can tell the
variants apart at all: the spread of their final losses against the seed-to-seed range.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from .figures import save_figure

#: budget fractions at which losses are reported (seed: convergence speed)
POINTS = (0.10, 0.25, 0.50, 1.00)
#: "comparable" tolerance of claim (e), relative to MHA's final loss (a definition, not a result)
COMPARABLE = 0.01
#: seeds a variant needs before a claim about it is decided (one seed cannot tell a difference from noise)
MIN_SEEDS = 2
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


def separated(lower: list[float], upper: list[float]) -> bool:
    """Every value of ``lower`` is below every value of ``upper`` (seeds do not overlap)."""
    return bool(lower and upper and max(lower) < min(upper))


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


def _pts(s: dict, name: str) -> dict[float, list[float]]:
    return {p: s["variants"][name]["losses"][str(p)] for p in POINTS}


def check_claims(s: dict) -> list[tuple[str, str, str]]:
    """(claim, HOLDS / DOES NOT HOLD / not run, evidence) for the five claims of seed §4."""
    v = s["variants"]
    res = []

    def need(*names):
        return [n for n in names if n not in v]

    def fmt(name, p):
        xs = v[name]["losses"][str(p)]
        return f"{np.mean(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"

    def row(claim, names, fn):
        miss = need(*names)
        if miss:
            res.append((claim, "not run", f"needs {', '.join(miss)}"))
            return
        ok, why = fn()
        verdict = "HOLDS" if ok else "DOES NOT HOLD"
        single = [VARIANT_NAMES.get(n, n) for n in names if len(v[n]["seeds"]) < MIN_SEEDS]
        if single:  # one seed cannot tell a difference from noise: say so, and what the numbers alone read
            verdict = f"UNDECIDED (< {MIN_SEEDS} seeds of {', '.join(single)}; the numbers alone read {verdict})"
        res.append((claim, verdict, why))

    def faster():
        parts, ok = [], True
        for n in ("momen_mha", "nag_mha"):
            wins = [p for p in POINTS if separated(_pts(s, n)[p], _pts(s, "mha")[p])]
            ok &= len(wins) >= 3
            parts.append(f"{VARIANT_NAMES[n]} below MHA (seeds separated) at {len(wins)}/4 points "
                         f"({', '.join(f'{int(p * 100)}%' for p in wins) or 'none'}); at 25%: {fmt(n, 0.25)} vs "
                         f"{fmt('mha', 0.25)}")
        return ok, "; ".join(parts)

    def nag_fastest():
        wins, sep = 0, 0
        for p in POINTS:
            means = {n: float(np.mean(v[n]["losses"][str(p)])) for n in v}
            order = sorted(means, key=means.get)
            if order[0] == "nag_mha":
                wins += 1
                sep += separated(v["nag_mha"]["losses"][str(p)], v[order[1]]["losses"][str(p)])
        return wins >= 3 and sep >= 3, (f"NagMHA has the lowest mean loss at {wins}/4 points, separated from "
                                        f"the runner-up at {sep}/4")

    def underperforms():
        wins = [p for p in POINTS if separated(_pts(s, "mha")[p], _pts(s, "mha2nd1st")[p])]
        return len(wins) == 4, (f"MHA2nd1st above MHA (seeds separated) at {len(wins)}/4 points; final "
                                f"{fmt('mha2nd1st', 1.0)} vs MHA {fmt('mha', 1.0)}")

    def simple_worse():
        wins = [p for p in POINTS if separated(_pts(s, "mha2nd1st")[p], _pts(s, "mha2nd1st_simple")[p])]
        return len(wins) >= 3, (f"simplified above MHA2nd1st (seeds separated) at {len(wins)}/4 points; final "
                                f"{fmt('mha2nd1st_simple', 1.0)} vs {fmt('mha2nd1st', 1.0)}")

    def comparable():
        a, b = _pts(s, "mha2nd_lite")[1.0], _pts(s, "mha")[1.0]
        rng = max(max(a) - min(a), max(b) - min(b))
        tol = max(2 * rng, COMPARABLE * float(np.mean(b)))
        d = float(np.mean(a) - np.mean(b))
        return abs(d) <= tol, f"final Δ = {d:+.3f} nats (tolerance {tol:.3f}); lite {fmt('mha2nd_lite', 1.0)} vs MHA {fmt('mha', 1.0)}"

    row("(a) MomenMHA and NagMHA converge faster than MHA", ("mha", "momen_mha", "nag_mha"), faster)
    row("(b) NagMHA converges fastest of all variants", ("nag_mha", "mha"), nag_fastest)
    row("(c) MHA2nd1st consistently underperforms MHA", ("mha", "mha2nd1st"), underperforms)
    row("(d) the simplified MHA2nd1st is worse still", ("mha2nd1st", "mha2nd1st_simple"), simple_worse)
    row("(e) MHA2nd-lite is comparable to MHA", ("mha", "mha2nd_lite"), comparable)
    return res


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


def claims_table(s: dict) -> str:
    rows = ["| seed §4 claim | here | evidence (validation loss, mean [min, max] over seeds) |", "|---|:---:|---|"]
    rows += [f"| {c} | {verdict} | {why} |" for c, verdict, why in check_claims(s)]
    return "\n".join(rows)


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
