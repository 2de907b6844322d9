"""``energyformer demo`` / ``make demo``: one small, meaningful comparison per system, on one report page.

=========  ====================================  =============================================================
stage      comparison                            what is compared
=========  ====================================  =============================================================
cem        CEM vs Llama (Shakespeare LM)          validation perplexity and bits/byte (CEM seed §4)
intrinsic  NagMHA vs MHA (Shakespeare LM)         validation perplexity (intrinsic-optimizer seed: Nesterov
                                                  attention vs softmax attention, same MLP kind)
hyperset   Hyper-SET vs looped Transformer        Sudoku cell accuracy at the trained 8 iterations and at 16
                                                  (test-time extrapolation, Hyper-SET §4)
eqt        EqT vs baseline Transformer            cumulative-parity accuracy (equilibrium transformer)
bare_sa    bare SA vs recycled transformer        Potts masked-token cross-entropy against the Bayes optimum
                                                  (bare self-attention seed)
=========  ====================================  =============================================================

Every run is an ordinary run of a config under ``configs/`` (the system's own config with a CPU-demo
budget as ``--set`` overrides), trained by the one trainer, in ``OUT/<stage>/<run>``. Each stage writes
``OUT/<stage>/results.json`` and one figure (training loss and the compared metric); the report page
``OUT/report.md`` is rendered from every stage's results present, so ``--only NAME`` reruns one stage
and keeps the others on the page. The page is rewritten (atomically) when a stage starts and when it ends:
a stage being retrained loses its old results.json and figure first (its run folders are overwritten), and
shows as "not finished" until its new results are written, so the page never pairs new figures or run
folders with old numbers. Every ``--set`` is checked against every selected stage's configs, and the other
stages' results.json files are read, before anything trains. The budgets are sized for a few minutes on
2 CPU cores in total: the numbers show the comparison working, not the papers' results (those are
``energyformer reproduce``).

**Verdicts.** One seed cannot tell a difference from noise, so each stage's headline decides its
comparison (:class:`Compare`) by :func:`energyformer.analysis.verdicts.compare` with the seed spread of
the same demo as the bound (``single_seed_bound``): the largest max − min over seeds of the compared
metric in either run, from ``demo_noise.json`` (written by ``scripts/demo_seed_spread.py`` from the
demo trained at several ``train.seed``). A margin inside it is UNDECIDED; both runs at chance is
UNTESTABLE. A changed budget (``--steps``, ``--set``) makes the stored spread a guide only, and the
line says so.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .utils.io import atomic_write_text, read_json
from .utils.markdown import md_table
from .utils.validate import ConfigError, DataError

TRAIN = ["train.eval_every=0", "train.save_every=0", "train.log_every=5", "train.tensorboard=false"]
LM = ["task.tokenizer=bpe", "task.seq_len=64", "task.batch_size=16", "task.eval_batch_size=16",
      "task.eval_max_batches=8", "model.max_seq_len=64", "model.dim=64", "model.heads=4", "model.n_layers=2"]

PARITY = ["task.data.length=16", "task.data.n_test=1024", "train.lr=3e-3"]
POTTS = ["task.batch_size=64", "task.eval_sequences=1024", "task.calibrate_sequences=1024"]
DEFAULT_OUT = "runs/demo"
UNFINISHED = "unfinished.json"  # OUT/<stage>/unfinished.json: the stage started and has no results yet


@dataclass
class Run:
    """One run of a stage: a label on the page, a config under configs/, its demo overrides."""

    label: str
    config: str
    overrides: list[str]


@dataclass(frozen=True)
class Compare:
    """The stage's decided comparison: ``a`` vs ``b`` (run labels) on ``metric``; ``claim`` is the sentence
    decided ("A beats B"); ``chance``: the metric's value at chance (both runs within ``at_band``:
    UNTESTABLE)."""

    metric: str
    a: str
    b: str
    higher_is_better: bool
    chance: float | None = None
    at_band: float = 0.0


@dataclass
class Stage:
    """One system's comparison: runs, the metrics on the page (key, label, lower is better), a headline."""

    name: str
    title: str
    runs: list[Run]
    metrics: list[tuple[str, str, bool]]
    headline: Callable[[dict[str, dict]], str]
    reference: tuple[str, str] | None = None  # (metric key, label): a line drawn on the metric panel
    steps: int = 0
    notes: list[str] = field(default_factory=list)
    compare: Compare | None = None


def _f(x: float | None, nd: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}g}"


@functools.cache
def seed_noise() -> dict:
    """``demo_noise.json``: {stage: {run label: {metric: {seed: value}}}} (empty when absent)."""
    path = Path(__file__).with_name("demo_noise.json")
    return json.loads(path.read_text())["stages"] if path.is_file() else {}


def noise_bound(stage: str, c: Compare) -> tuple[float | None, int]:
    """(the largest max − min over seeds of ``c.metric`` in run a or b, the fewest seeds behind it)."""
    runs = seed_noise().get(stage, {})
    spreads, counts = [], []
    for label in (c.a, c.b):
        vals = list(runs.get(label, {}).get(c.metric, {}).values())
        if len(vals) < 2:
            return None, len(vals)
        spreads.append(max(vals) - min(vals))
        counts.append(len(vals))
    return max(spreads), min(counts)


def verdict_line(stage: str, c: Compare, m: dict[str, dict], changed: bool = False) -> str:
    """"**A lower/higher METRIC than B: VERDICT** (why)": one seed per run, decided beyond this demo's
    seed spread (:func:`noise_bound`)."""
    from .analysis.verdicts import Rules, compare

    va, vb = m.get(c.a, {}).get(c.metric), m.get(c.b, {}).get(c.metric)
    claim = f"{c.a} {'higher' if c.higher_is_better else 'lower'} {c.metric.removeprefix('eval/')} than {c.b}"
    if va is None or vb is None:
        return f"{claim}: not measured."
    bound, n = noise_bound(stage, c)
    out = compare([va], [vb], higher_is_better=c.higher_is_better,
                  rules=Rules(single_seed_bound=bound, chance=c.chance, at_band=c.at_band))
    if out.margin is None:  # untestable: at chance, diverged
        why = out.reason
    elif bound is None:
        why = f"margin {out.margin:+.3g}; one seed and no recorded seed spread for this stage"
    else:
        why = (f"margin {out.margin:+.3g}, decided only beyond {bound:.3g}: the largest spread of either run "
               f"over {n} seeds of this demo")
        if changed:
            why += ", measured at the default budget (a guide only for this changed run)"
    return f"**{claim}: {out.verdict}** ({why})."


def _lm_headline(a: str, b: str) -> Callable[[dict[str, dict]], str]:
    def text(m: dict[str, dict]) -> str:
        pa, pb = m[a].get("eval/ppl"), m[b].get("eval/ppl")
        return f"validation perplexity {a} {_f(pa, 4)} vs {b} {_f(pb, 4)} after the same steps on the same batches."
    return text


def _sudoku_headline(m: dict[str, dict]) -> str:
    parts = [f"{k} {_f(100 * v.get('eval/cell_accuracy', float('nan')), 3)}% at 8 iterations, "
             f"{_f(100 * v.get('eval/cell_accuracy@16', float('nan')), 3)}% at 16" for k, v in m.items()]
    return "cell accuracy (blank cells): " + "; ".join(parts) + "."


def _parity_headline(m: dict[str, dict]) -> str:
    return "parity accuracy (per position, chance 50%): " + "; ".join(
        f"{k} {_f(100 * v.get('eval/accuracy', float('nan')), 3)}%" for k, v in m.items()) + "."


def _potts_headline(m: dict[str, dict]) -> str:
    bayes = next(iter(m.values())).get("eval/bayes_loss")
    return (f"masked-token cross-entropy (nats; Bayes optimum {_f(bayes, 4)}, uniform {math.log(10):.4g}): "
            + "; ".join(f"{k} {_f(v.get('eval/model_loss'), 4)} (excess {_f(v.get('eval/excess_loss'), 2)})"
                        for k, v in m.items()) + "." )


STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("cem", "CEM vs Llama — language modelling on Shakespeare", [
        Run("Llama", "lm/llama", LM),
        Run("CEM", "lm/cem_full", LM),
    ], [("eval/ppl", "val perplexity", True), ("eval/bpb", "bits/byte", True)], _lm_headline("CEM", "Llama"),
        steps=250, compare=Compare("eval/bpb", "CEM", "Llama", higher_is_better=False)),
    Stage("intrinsic", "NagMHA vs MHA — intrinsic-optimizer attention on Shakespeare", [
        Run("MHA", "intrinsic/mha", LM),
        Run("NagMHA", "intrinsic/nag_mha", LM),
    ], [("eval/ppl", "val perplexity", True), ("eval/bpb", "bits/byte", True)], _lm_headline("NagMHA", "MHA"),
        steps=250, compare=Compare("eval/bpb", "NagMHA", "MHA", higher_is_better=False), notes=["the seed's pairing: MHA + GELU MLP vs Nesterov attention + Nesterov GELU MLP, "
                          "the momentum carried across sublayers; the local BPE instead of GPT-2's 50k ids"]),
    Stage("hyperset", "Hyper-SET vs looped Transformer — Sudoku, and more iterations than trained", [
        Run("Hyper-SET", "hyperset/sudoku_hyperset", ["task.eval_max=200", "task.eval_batch_size=200"]),
        Run("looped Transformer", "hyperset/sudoku_transformer", ["task.eval_max=200", "task.eval_batch_size=200"]),
    ], [("eval/cell_accuracy", "cell acc. @8", False), ("eval/cell_accuracy@16", "cell acc. @16", False)],
        _sudoku_headline, steps=250, compare=Compare("eval/cell_accuracy", "Hyper-SET", "looped Transformer",
                                                     higher_is_better=True, chance=1 / 9, at_band=0.01), notes=["chance is 1/9 of the blank cells: at this budget both models sit near it, on the "
                                             "plateau that issue 20 traces (docs/results/hyperset/plateau/); the reproduction "
                                             "(`energyformer reproduce hyperset-sudoku`) trains 6000 steps"]),
    Stage("eqt", "Equilibrium transformer vs baseline — cumulative parity", [
        Run("baseline", "eqt/baseline", PARITY),
        Run("EqT", "eqt/eqt", PARITY),
    ], [("eval/accuracy", "accuracy", False)], _parity_headline, steps=400,
        compare=Compare("eval/accuracy", "EqT", "baseline", higher_is_better=True, chance=0.5, at_band=0.01),
        notes=["length 16 (the reproduction's shortest length; learnable in a few hundred steps); EqT's "
               "training loss includes its energy terms (rev, mask, conf), so the curves differ by more than CE"]),
    Stage("bare_sa", "Bare self-attention vs recycled transformer — Potts, against the Bayes optimum", [
        Run("bare SA", "bare_sa/potts_bare_sa", POTTS + ["task.eval_iterations=[1]"]),
        Run("recycled transformer", "bare_sa/potts_recycled_x3", POTTS + ["task.eval_iterations=[3]"]),
    ], [("eval/model_loss", "cross-entropy", True)], _potts_headline, reference=("eval/bayes_loss", "Bayes optimum"),
        steps=800, compare=Compare("eval/model_loss", "bare SA", "recycled transformer", higher_is_better=False)),
]}


def run_overrides(stage: Stage, run: Run, folder: Path, steps: int | None, overrides: list[str]) -> list[str]:
    """A run's overrides: its own, the demo's training settings and step budget, then ``--set``, then its folder and
    name (a --set name= trained every run of a stage into one folder, the baseline lost)."""
    name = run.label.replace(" ", "_").replace("-", "_")
    return run.overrides + TRAIN + [f"train.steps={steps or stage.steps}", *overrides, f"out_dir={folder}",
                                    f"name={name}"]


def check_overrides(names: list[str], out: Path, steps: int | None, overrides: list[str]) -> None:
    """Load every run config of the stages ``names`` with its overrides before anything trains: a --set one stage's
    config refuses is a one-line error naming the stage and config (it stopped the demo when that stage started,
    after the earlier stages trained, and no page was written)."""
    from .experiment import load_run_config

    for n in names:
        for r in STAGES[n].runs:
            try:
                load_run_config(r.config, run_overrides(STAGES[n], r, out / n, steps, overrides))
            except ConfigError as err:
                raise ConfigError(f"demo stage {n!r} (config {r.config}): {err}") from None


def rerun_command(names: list[str], out: Path, steps: int | None, overrides: list[str]) -> str:
    """The ``energyformer demo`` command line that trains the stages ``names`` as given here, onto the same page."""
    args = ["energyformer", "demo", *(x for n in names for x in ("--only", n))]
    args += ["--steps", str(steps)] if steps else []
    args += [x for o in overrides for x in ("--set", o)]
    args += ["--out", str(out)] if Path(out) != Path(DEFAULT_OUT) else []
    return " ".join(shlex.quote(str(a)) for a in args)


def start_stage(stage: Stage, out: Path, rerun: str) -> None:
    """Remove the stage's old results.json and figure (its run folders are about to be overwritten) and mark it
    unfinished with the command that reruns it: the page shows it as not finished until its new results exist."""
    folder = out / stage.name
    for f in (folder / "results.json", folder / f"{stage.name}.png"):
        f.unlink(missing_ok=True)
    atomic_write_text(folder / UNFINISHED, json.dumps({"rerun": rerun}) + "\n")


def run_stage(stage: Stage, out: Path, steps: int | None = None, overrides: list[str] = ()) -> dict:
    """Train the stage's runs, write ``out/<stage>/results.json`` and its figure; returns the results. The page
    ``out/report.md`` is rewritten when the stage starts (the stage shown as not finished) and when it ends."""
    from .experiment import load_run_config, run_experiment

    folder, overrides = out / stage.name, list(overrides)
    rerun = rerun_command([stage.name], out, steps, overrides)
    start_stage(stage, out, rerun)
    render_report(out)
    results: dict = {"name": stage.name, "title": stage.title, "runs": {}, "steps": steps or stage.steps,
                     "rerun": rerun}
    t0, c0 = time.perf_counter(), time.process_time()
    for i, r in enumerate(stage.runs, 1):
        ov = run_overrides(stage, r, folder, steps, overrides)
        cfg = load_run_config(r.config, ov)
        results["steps"] = cfg.train.steps  # a --set train.steps=N trained N (the page said --steps' number)
        print(f"  [{stage.name} {i}/{len(stage.runs)}] {r.label}: {r.config}, {results['steps']} steps", flush=True)
        res = run_experiment(cfg, overwrite=True)
        m = {k: v for k, v in res.final.items() if k.startswith("eval/") and isinstance(v, (int, float))}
        if "eval/bayes_loss" in m and "eval/excess_loss" in m:  # the model's loss as the excess is measured
            m["eval/model_loss"] = m["eval/bayes_loss"] + m["eval/excess_loss"]
        results["runs"][r.label] = {
            "config": r.config, "overrides": ov, "params": res.params.get("total"), "seconds": res.seconds,
            "loss_history": res.loss_history, "metrics": m}
    results["seconds"], results["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
    metrics = {k: v["metrics"] for k, v in results["runs"].items()}
    results["headline"] = stage.headline(metrics)
    if stage.compare is not None:
        changed = bool(overrides) or results["steps"] != stage.steps
        results["verdict"] = verdict_line(stage.name, stage.compare, metrics, changed)
    results["figure"] = stage_figure(stage, results, folder / f"{stage.name}.png").name
    atomic_write_text(folder / "results.json", json.dumps(results, indent=1))
    (folder / UNFINISHED).unlink(missing_ok=True)
    render_report(out)
    return results


def stage_figure(stage: Stage, results: dict, path: Path) -> Path:
    """Two panels: training loss per step (both runs), and the compared metric(s) as bars."""
    from .analysis.figures import save_figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    for label, r in results["runs"].items():
        ax1.plot(range(1, len(r["loss_history"]) + 1), r["loss_history"], label=label, lw=1.2)
    ax1.set(xlabel="step", ylabel="training loss", title="training")
    ax1.legend(fontsize=8)
    labels = list(results["runs"])
    width = 0.8 / len(stage.metrics)
    for j, (key, name, _) in enumerate(stage.metrics):
        vals = [results["runs"][lab]["metrics"].get(key, float("nan")) for lab in labels]
        bars = ax2.bar([i + j * width for i in range(len(labels))], vals, width, label=name)
        ax2.bar_label(bars, fmt="%.3g", fontsize=8)
    if stage.reference is not None:
        key, name = stage.reference
        ref = next(iter(results["runs"].values()))["metrics"].get(key)
        if ref is not None:
            ax2.axhline(ref, color="k", ls="--", lw=1, label=name)
    ax2.set_xticks([i + width * (len(stage.metrics) - 1) / 2 for i in range(len(labels))], labels)
    ax2.set(title="evaluation")
    ax2.legend(fontsize=8)
    fig.suptitle(stage.title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


# what the page reads of a results.json: key -> (types, in words)
_NUMBER = ((int, float), "a number")
_RESULT_KEYS = {"title": ((str,), "a string"), "headline": ((str,), "a string"), "steps": ((int,), "an integer"),
                "seconds": _NUMBER, "figure": ((str,), "a string"), "runs": ((dict,), "an object")}
_RUN_KEYS = {"config": ((str,), "a string"), "seconds": _NUMBER, "metrics": ((dict,), "an object")}


def _missing(d: dict, keys: dict, where: str = "") -> str | None:
    """What is wrong with ``d`` against ``keys`` (the first key missing or of another type), or None."""
    for key, (types, words) in keys.items():
        v = d.get(key)
        if not isinstance(v, types) or isinstance(v, bool):
            return f"{where}{key!r} is {'missing' if key not in d else 'not ' + words}"
    return None


def _run_problem(label: str, r) -> str | None:
    """What the page could not read in one run's entry of a results.json, or None."""
    where = f"run {label!r}: "
    if not isinstance(r, dict):
        return f"{where}not an object"
    if r.get("params") is not None and (not isinstance(r["params"], int) or isinstance(r["params"], bool)):
        return f"{where}'params' is not an integer"
    return _missing(r, _RUN_KEYS, where)


def _results_problem(res) -> str | None:
    """What the page could not read in a parsed results.json, or None."""
    if not isinstance(res, dict):
        return f"holds a JSON {type(res).__name__}, not an object"
    problem = _missing(res, _RESULT_KEYS)
    if problem is None:
        problem = next((p for p in (_run_problem(k, r) for k, r in res["runs"].items()) if p), None)
    return problem


def read_results(path: Path) -> dict:
    """A stage's ``results.json``, checked for what the page reads: a damaged one is a one-line DataError naming the
    file, what is wrong and how to mend it."""
    fix = f"delete it, or retrain that stage: {rerun_command([path.parent.name], path.parent.parent, None, [])}"
    try:
        res = read_json(path, kind=object)
    except DataError as err:
        raise DataError(f"{err}; {fix}") from None
    problem = _results_problem(res)
    if problem:
        raise DataError(f"{path}: {problem}; {fix}")
    return res


def check_other_results(out: Path, names: list[str]) -> None:
    """Read the results.json of every stage not in ``names`` (the page keeps them) before anything trains."""
    for n in STAGES:
        f = out / n / "results.json"
        if n not in names and f.exists():
            read_results(f)


def _stage_section(stage: Stage, res: dict) -> list[str]:
    """The page's section of a finished stage: headline, verdict, table, notes, budget and rerun line, figure."""
    name = stage.name
    lines = [f"## {res['title']}", "", res["headline"], ""] + ([res["verdict"], ""] if res.get("verdict") else [])
    head = ["run", "config", "params", *(m[1] for m in stage.metrics), "seconds"]
    lines += md_table(head, ([label, f"`{r['config']}`", "—" if r.get("params") is None else f"{r['params']:,}",
                              *(_f(r["metrics"].get(k), 4) for k, _, _ in stage.metrics), f"{r['seconds']:.0f}"]
                             for label, r in res["runs"].items()))
    lines += [""] + [f"*{n}*" for n in stage.notes] + ([""] if stage.notes else [])
    rerun = res["rerun"] if isinstance(res.get("rerun"), str) else f"energyformer demo --only {name}"
    cpu = res.get("cpu_seconds")
    lines += [f"{res['steps']} training steps per run; stage time {res['seconds']:.0f} s "
              f"({cpu if isinstance(cpu, (int, float)) else float('nan'):.0f} s of CPU). Rerun: `{rerun}`.", "",
              f"![{name}]({name}/{res['figure']})", ""]
    return lines


def _unfinished_section(stage: Stage, out: Path) -> list[str]:
    """The page's section of a stage started and not finished (stopped, or still running): no numbers."""
    try:
        rerun = str(json.loads((out / stage.name / UNFINISHED).read_text())["rerun"])
    except (OSError, ValueError, KeyError, TypeError):
        rerun = rerun_command([stage.name], out, None, [])
    return [f"## {stage.title}", "", f"*Not finished: this stage was started and stopped (or is still running) "
            f"before its results were written; `{stage.name}/` holds a partial run. Rerun: `{rerun}`.*", ""]


def render_report(out: Path) -> Path:
    """``out/report.md`` (written atomically) from every ``out/<stage>/results.json`` present, in stage order; a
    stage started and not finished is listed as such."""
    lines = ["# energyformer demo: the five systems, each against its baseline", "",
             "Tiny models, a few minutes on CPU: the comparisons show each system training and being measured "
             "the way its paper measures it, not the papers' numbers (see `energyformer reproduce`).", ""]
    total = cpu = 0.0
    for name, stage in STAGES.items():
        f = out / name / "results.json"
        if f.is_file():
            res = read_results(f)
            total += res["seconds"]
            cpu += res["cpu_seconds"] if isinstance(res.get("cpu_seconds"), (int, float)) else 0.0
            lines += _stage_section(stage, res)
        elif (out / name / UNFINISHED).is_file():
            lines += _unfinished_section(stage, out)
    lines.append(f"Total training and evaluation time of the stages on this page: {total:.0f} s "
                 f"({cpu:.0f} s of CPU).")
    return atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


def _interrupted(left: list[str], out: Path, steps: int | None, overrides: list[str]) -> int:
    """After Ctrl-C in stage ``left[0]``: say what the page shows and the command that continues; returns 130."""
    cmd = rerun_command(left, out, steps, overrides)
    print(f"\nenergyformer: interrupted in demo stage {left[0]!r}; {out / 'report.md'} shows the finished stages "
          f"and {left[0]} as not finished; continue with: {cmd} (trains {', '.join(left)} again from the start, "
          "the finished stages stay on the page)", file=sys.stderr, flush=True)
    return 130


def main(out: str = DEFAULT_OUT, steps: int | None = None, overrides: list[str] | None = None,
         only: list[str] | None = None, debug: bool = False) -> int:
    """Run the stages (all, or ``only``, each once in the order given), print progress and headlines; the page
    ``out/report.md`` is rewritten as each stage starts and ends. Overrides and the other stages' results are
    checked first."""
    names = list(dict.fromkeys(only)) if only else list(STAGES)
    bad = [n for n in names if n not in STAGES]
    if bad:
        raise ConfigError(f"--only {bad[0]!r}: unknown demo stage; allowed: {', '.join(STAGES)}")
    overrides = [str(o) for o in overrides or []]
    fixed = [o for o in overrides if o.partition("=")[0].strip() in ("name", "out_dir")]
    if fixed:
        raise ConfigError(f"--set {fixed[0]}: the demo names each run and its folder itself (OUT/<stage>/<run>); "
                          "--out sets OUT")
    out_dir = Path(out)
    check_overrides(names, out_dir, steps, overrides)
    check_other_results(out_dir, names)
    t0, done = time.perf_counter(), 0
    try:
        for i, n in enumerate(names, 1):
            st = STAGES[n]
            print(f"[{i}/{len(names)}] {st.title}", flush=True)
            res = run_stage(st, out_dir, steps, overrides)
            done = i
            print(f"  -> {res['headline']} ({res['seconds']:.0f} s)", flush=True)
            if res.get("verdict"):
                print(f"     {res['verdict'].replace('**', '')}", flush=True)
            print(flush=True)
    except KeyboardInterrupt:
        if debug:  # --debug: the traceback, as every other command gives it
            raise
        return _interrupted(names[done:], out_dir, steps, overrides)
    report = render_report(out_dir)
    print(f"demo done in {time.perf_counter() - t0:.0f} s; report: {report}")
    return 0
