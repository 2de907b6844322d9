"""The slides' claims on recycling and bare self-attention (seed 004), by declared rules (issue 22).

The slides give no numbers, so each claim is a comparison on our runs decided by
:func:`energyformer.analysis.verdicts.compare`. Every model is trained with one seed and no
seed-to-seed spread is measured, so a comparison decides only beyond a declared bound:

* test cross-entropies (all on the same 3,200 test sites): two standard errors of the paired
  difference when the page measured that pair (``potts.paired``), else two times the largest paired
  standard error on the page (:func:`ce_noise`) — test-set sampling noise, a lower bound on the noise a
  second training seed would add;
* wall-clock times (log scale): the largest max/min ratio of one model's step time over the interleaved
  repeats of ``benchmark.md`` (:func:`timing_noise`);
* measurements of one trained model on fixed data (memory, coupling recovery, denoising overlaps):
  a threshold, no band.

Claims and rules:

* *recycled x3 matches 3 layers and factored attention*: both paired differences within ``MATCH_TOL``.
* *bare SA works qualitatively like a recycled transformer*: the recycled model's loss at its best
  recycling count q > 1 beats its count 1 beyond the noise (else the reference behaviour is not there:
  UNDECIDED, or UNTESTABLE when count 1 is better beyond the noise), and bare SA's gain from its dynamics
  (count 1 -> its best count > 1; negative when they only hurt) is not below the recycled gain by more
  than half of it.
* *training by pseudo-likelihood is fast*: bare SA reaches its final validation loss in less training
  time than recycled x3 needs to reach it.
* *worse test performance*: bare SA's test CE above recycled x3's.
* *q sampled in training removes the dependence on q*: recycled x3 (q_train in [2, 4]) at every q in
  its range within ``Q_TOL`` of its best, while recycled x1 (trained at q = 1) gets worse from q = 1 to 2.
* *sensitive to hyper-parameters*: bare SA's validation-loss range over its 10x learning-rate sweep
  (λ = 1) above the recycled block's over its 16x sweep (band: twice the CE noise, a difference of ranges).
* *more explainable*, *high memory usage*, *transient memories*: thresholds on one measurement.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .claim_rows import RuleSpec, band_text, markdown_rows, rule_text, verdict_text
from .verdicts import Outcome, Rules, Verdict, compare

MATCH_TOL = 0.01   # nats: "matches"
Q_TOL = 0.02       # nats: "no dependence on q" within the training range
CORR_MIN = 0.5     # planted couplings "can be read in J"


def _ce(m: dict) -> float:
    return m.get("loss_cal", m["loss"])


def ce_noise(P: dict) -> tuple[float, str]:
    """Twice the largest paired standard error of a test-CE difference on the page, and its source."""
    name, (_, se) = max(P["paired"].items(), key=lambda kv: kv[1][1])
    return 2 * se, f"2 x the largest paired SE on this page ({name}: {se:.4f}); one seed, no seed spread measured"


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


def timing_noise(bench: dict[str, tuple[float, float, float]]) -> tuple[float, str] | None:
    """ln of the largest max/min ratio of one step time over the benchmark's interleaved repeats."""
    if not bench:
        return None
    name, (_, lo, hi) = max(bench.items(), key=lambda kv: kv[1][2] / kv[1][1])
    return math.log(hi / lo), (f"ln of the largest max/min of one step's time over the interleaved repeats of "
                               f"benchmark.md ({name}: {lo:.2f}-{hi:.2f} ms)")


def _weaker(*outs: Outcome) -> Outcome:
    order = [Verdict.UNTESTABLE, Verdict.DOES_NOT_HOLD, Verdict.UNDECIDED, Verdict.HOLDS]
    return min(outs, key=lambda o: order.index(o.verdict))


def _threshold(ok: bool, what: str) -> Outcome:
    return Outcome(Verdict.HOLDS if ok else Verdict.DOES_NOT_HOLD, None, None, what)


def _ttt(curve: list, target: float) -> float | None:
    """First training time at which the validation loss is at or below target."""
    for _, t, v in curve:
        if v <= target + 1e-12:
            return t
    return None


def _row(text: str, o: Outcome, spec: RuleSpec | str, measured: str, unit: str = "") -> list[str]:
    rule = spec if isinstance(spec, str) else rule_text(spec)
    unit = unit if isinstance(spec, str) else spec.unit
    return [text, verdict_text(o, unit) if o.margin is not None else str(o.verdict), rule, measured]


def _potts_rows(P: dict, bench: dict) -> list[list[str]]:
    M, pr, b = P["models"], P["paired"], P["bayes"]
    ce = {k: _ce(v["test"]) for k, v in M.items()}
    noise, src = ce_noise(P)
    rows = []

    def pair_spec(name: str, claim: str = "better", tol: float = 0.0) -> RuleSpec:
        return RuleSpec(Rules(noise=2 * pr[name][1]), claim, tol, "nats", f"2 SE of the paired difference {name}")

    # (1) recycled x3 matches 3 layers and factored attention
    outs, parts = [], []
    for name in ("recycled x3 - 3 layers", "recycled x3 - factored"):
        d, se = pr[name]
        outs.append(compare([d], 0.0, higher_is_better=False, rules=pair_spec(name).rules, claim="equal",
                            tolerance=MATCH_TOL))
        parts.append(f"{name} {d:+.4f} ± {se:.4f}")
    rule = (f"each paired difference within {MATCH_TOL} nats ± the band; band = 2 SE of that pair (one seed: "
            "no seed spread measured); the weaker part decides")
    rows.append(_row("One recycled layer x3 matches 3 distinct layers and factored attention", _weaker(*outs), rule,
                     f"test CE: recycled x3 {ce['recycled x3']:.4f}, 3 layers {ce['3 layers']:.4f}, factored "
                     f"{ce['factored']:.4f} (Bayes {b['bayes_loss']:.4f}); " + "; ".join(parts)
                     + "; " + ", ".join(str(o.verdict) for o in outs), "nats"))
    # (2) bare SA works qualitatively like a recycled transformer
    qs = P["qs"]
    r3 = M["recycled x3"]["test"]
    bare = M["bare SA"]["test"]
    rec = {q: r3[f"loss_q{q}"] for q in qs}
    bsa = {q: bare[f"loss_cal_q{q}"] for q in qs}
    more = [q for q in qs if q > 1]  # recycling counts beyond one pass
    q_r, q_b = min(more, key=rec.get), min(more, key=bsa.get)
    spec = RuleSpec(Rules(noise=noise), unit="nats", noise_source=src)
    pre = compare([rec[q_r]], [rec[1]], higher_is_better=False, rules=spec.rules)
    g_rec, g_bare = rec[1] - rec[q_r], bsa[1] - bsa[q_b]
    if pre.verdict == Verdict.HOLDS:
        o = compare([g_bare], [g_rec], higher_is_better=True, rules=spec.rules, claim="not_worse",
                    tolerance=g_rec / 2)
    elif pre.verdict == Verdict.DOES_NOT_HOLD:
        o = Outcome(Verdict.UNTESTABLE, None, None, "the recycled model is worse at every q > 1 than at q = 1: "
                                                    "no recycling gain to match")
    else:
        o = Outcome(Verdict.UNDECIDED, None, None, f"the recycled gain is inside the noise ({pre.reason})")
    rows.append(_row("Bare SA works qualitatively like recycled transformers", o,
                     f"(a) recycled x3's test CE at its best q > 1 beats q = 1, and (b) bare SA's gain from its "
                     f"dynamics (q = 1 -> its best q > 1) is not below the recycled gain by more than half of it, each ± the band; "
                     f"{band_text(spec)}",
                     f"recycled x3: q = 1 {rec[1]:.4f}, best q = {q_r} {rec[q_r]:.4f} (gain {g_rec:+.4f}: "
                     f"{verdict_text(pre, 'nats')}); bare SA (calibrated): q = 1 {bsa[1]:.4f}, best q = {q_b} "
                     f"{bsa[q_b]:.4f} (gain {g_bare:+.4f}), q = {qs[-1]} {bsa[qs[-1]]:.4f}"))
    # (3) training by pseudo-likelihood is fast
    target = M["bare SA"]["curve"][-1][2] if M["bare SA"]["curve"] else None
    tn = timing_noise(bench)
    tspec = RuleSpec(Rules(single_seed_bound=tn[0] if tn else None), unit="ln s",
                     noise_source=tn[1] if tn else "no interleaved benchmark committed")
    if target is not None:
        tb, tr = _ttt(M["bare SA"]["curve"], target), _ttt(M["recycled x3"]["curve"], target)
        if tb is None or tr is None:
            o = Outcome(Verdict.UNTESTABLE, None, None, "a model never reached the target within its run")
        else:
            o = compare([math.log(tb)], [math.log(tr)], higher_is_better=False, rules=tspec.rules)
        rows.append(_row("Training by pseudo-likelihood is fast (no backpropagation)", o,
                         "bare SA reaches its final validation loss in less training time than recycled x3, by more "
                         "than the band (log of seconds); " + band_text(tspec),
                         f"time to the validation loss {target:.4f}: bare SA {tb:.1f} s, recycled x3 "
                         + (f"{tr:.1f} s" if tr is not None else "never within its run")
                         + " (training runs made one after another on a shared machine)", "ln s"))
    # (4) worse test performance
    d3, s3 = pr["bare SA - recycled x3"]
    sp = pair_spec("bare SA - recycled x3")
    o = compare([d3], 0.0, higher_is_better=True, rules=sp.rules)
    rows.append(_row("Con: worse test performance than the recycled transformer", o, sp,
                     f"test CE bare SA {ce['bare SA']:.4f} vs recycled x3 {ce['recycled x3']:.4f}: {d3:+.4f} ± "
                     f"{s3:.4f}; accuracy {bare['accuracy']:.3f} vs {r3['accuracy']:.3f} "
                     f"(Bayes {b['bayes_accuracy']:.3f})"))
    # (5) more explainable
    rb = P["recovery_bare"]
    rows.append(_row("Pro: more explainable (the data's planted couplings can be read in J)",
                     _threshold(rb["corr"] > CORR_MIN, ""),
                     f"corr(⟨J_ij, U⟩, planted J_ij) > {CORR_MIN} (one trained J, no band)",
                     f"corr = {rb['corr']:.3f}, share of ‖J‖² along U {rb['u_share']:.2f} (factored attention: "
                     f"corr(A, J) = {P['recovery_factored']['corr_A']:.3f})"))
    # (6) q sampled in training
    r1 = M["recycled x1"]["test"]
    in_range = {q: r3[f"loss_q{q}"] for q in (2, 3, 4) if f"loss_q{q}" in r3}
    best3 = min(rec.values())
    a = compare([max(in_range.values())], [best3], higher_is_better=False, rules=spec.rules, claim="equal",
                tolerance=Q_TOL)
    bpart = compare([r1["loss_q1"]], [r1["loss_q2"]], higher_is_better=False, rules=spec.rules)
    rows.append(_row("Recycling: sampling q_train in [q_min, q_max] removes the dependence on q", _weaker(a, bpart),
                     f"(a) recycled x3 at every q in [2, 4] within {Q_TOL} nats of its best and (b) recycled x1 worse at "
                     f"q = 2 than at q = 1, each ± the band; {band_text(spec)}; the weaker part decides",
                     "recycled x3 at q = 2, 3, 4: " + ", ".join(f"{v:.4f}" for v in in_range.values())
                     + f" (best {best3:.4f}): {a.verdict}; recycled x1 q = 1 {r1['loss_q1']:.4f}, q = 2 "
                     f"{r1['loss_q2']:.4f}: {bpart.verdict}", "nats"))
    return rows


def claim_rows(r: dict, bench_text: str = "") -> list[list[str]]:
    """[claim, verdict, rule, measured] rows from ``results.json``'s content (and ``benchmark.md``)."""
    rows = []
    P = r.get("potts")
    if P:
        rows += _potts_rows(P, benchmark_steps(bench_text))
        noise, src = ce_noise(P)
    S = r.get("sweep")
    if P and S and S.get("bare_grid") and S.get("recycled_lr"):
        bl = [g["val_loss"] for g in S["bare_grid"] if g["lam"] == 1.0]
        tl = [g["val_loss"] for g in S["recycled_lr"]]
        sb, st = max(bl) - min(bl), max(tl) - min(tl)
        spec = RuleSpec(Rules(noise=2 * noise), unit="nats", noise_source=f"twice {noise:.4f}: a difference of ranges")
        rows.append(_row("Con: sensitive to hyper-parameters",
                         compare([sb], [st], higher_is_better=True, rules=spec.rules),
                         "bare SA's validation-loss range over its lr sweep (λ = 1) above the recycled block's; "
                         + rule_text(spec),
                         f"range over a 10x learning-rate sweep: bare SA {sb:.4f} nats (λ = 1), recycled x1 "
                         f"{st:.4f} nats over 16x", "nats"))
    Mm = r.get("memory")
    if Mm:
        pk = {k: v["step_peak_bytes"] / 2**20 for k, v in Mm.items()}
        c_b, c_t = pk["CIFAR p=4: bare SA (N=64, d=96)"], pk["CIFAR p=4: recycled x3 (dim 96)"]
        rows.append(_row("Con: high memory usage", _threshold(c_b > c_t, ""),
                         "bare SA's measured step peak above recycled x3's at the same image scale (one measurement)",
                         f"step peak: Potts bare SA {pk['Potts: bare SA (N=20, d=10)']:.1f} MiB vs recycled x3 "
                         f"{pk['Potts: recycled x3 (dim 64)']:.1f} MiB; CIFAR-sized (N = 64, d = 96) bare SA "
                         f"{c_b:.1f} MiB vs recycled x3 {c_t:.1f} MiB"))
    I = r.get("images") or {}
    for name in ("digits", "mnist"):
        if name not in I:
            continue
        c = I[name]["curves"]["test, noise 0.3"]["overlap"]
        T = len(c) - 1
        t = max(range(len(c)), key=c.__getitem__)
        rows.append(_row(f"Transient memories: denoising overlap peaks at finite t, then decays ({name})",
                         _threshold(0 < t < T and c[-1] < c[t] - 0.01, ""),
                         "the overlap's peak at 0 < t < T and a fall of more than 0.01 by T (fixed test images)",
                         f"overlap with the clean image: t = 0 {c[0]:.4f}, peak {c[t]:.4f} at t = {t}, "
                         f"t = {T} {c[-1]:.4f} (30% of channel values replaced)"))
    return rows


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


def claims_markdown(r: dict, out: Path) -> str:
    bench = out / "benchmark.md"
    text = bench.read_text() if bench.exists() else ""
    return markdown_rows(["claim", "verdict", "rule", "measured"], claim_rows(r, text))
