"""``energyformer reproduce hyperset-images``: Hyper-SET image classification at CPU scale (seed 002 §5.2,
Tables 1, 2, 4, 5, Fig. 4-6), beside the paper's CIFAR-10/100 and ImageNet-100 numbers.

Every model is a config under ``configs/images/`` (one config switch apart) trained by the library's
one trainer on an offline image set (default Fashion-MNIST; ``--dataset mnist``; digits for smoke
runs). Suites (``--suites``):

* ``main``      Table 1 (+ Table 2's 12-layer transformer): Transformer, ET, CRATE, CRATE-T, Hyper-SET at
                two widths, every width the paper's / 4 (parameters matched as the paper matches them).
* ``ablation``  Table 4: sigmoid / linear attention, softmax / gated FF, fixed step sizes 0.5 and 0.1.
* ``lora``      Table 5: depth-wise LoRA ranks 4, 8, 16, 32 vs none.
* ``tradeoff``  Fig. 4: distinct layers x iterations at depth 12, Hyper-SET and Transformer.
* ``seeds``     Hyper-SET and Transformer with a second seed (the spread a single-seed table hides).

Each run trains (or is reused from ``OUT/<dataset>/<name>/result.json`` when its config is unchanged),
then is evaluated on the validation and test splits. The report (``--report``, default
``OUT/report``) has the tables beside the paper's, the orderings the paper reports checked on our
numbers, accuracy over test-time iterations, the confusion matrices, and for the trained Hyper-SET
the per-iteration energies, effective rank and average angle (Fig. 5-6; ``analysis/hyperset.py``).
The paper trains 200 epochs on CIFAR at widths 384-896; we train about one epoch of a 28x28 set at a
quarter of those widths, so only directions can be compared, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from ..utils.cliargs import count, positive_float
from ..utils.paths import writable_dir
from ..analysis.classification import per_class_markdown, plot_confusion
from ..analysis.classification_report import (
    orderings, orderings_markdown, plot_curves, table1, table4, table5, table_tradeoff,
)
from ..experiment import load_run_config, load_trained, run_experiment
from ..train import CheckpointError
from ..utils.config import to_dict

SUITES: dict[str, list[str]] = {
    "main": ["transformer", "transformer_12layer", "et", "crate", "crate_t", "crate_t_code", "hyperset",
             "hyperset_wide"],
    "ablation": ["hyperset", "hyperset_sigmoid", "hyperset_linear", "hyperset_ff_softmax", "hyperset_ff_gated",
                 "hyperset_fixed05", "hyperset_fixed01"],
    "lora": ["hyperset", "hyperset_lora4", "hyperset_lora8", "hyperset_lora16", "hyperset_lora32"],
    "tradeoff": ["hyperset", "hyperset_l2i6", "hyperset_l4i3", "transformer", "transformer_l2i6",
                 "transformer_l4i3", "transformer_12layer"],
    "seeds": ["hyperset@1", "transformer@1"],
}
TRADEOFF = {"Hyper-SET": [(1, 12, "hyperset"), (2, 6, "hyperset_l2i6"), (4, 3, "hyperset_l4i3")],
            "Transformer": [(1, 12, "transformer"), (2, 6, "transformer_l2i6"), (4, 3, "transformer_l4i3"),
                            (12, 1, "transformer_12layer")]}
DATASET_NAMES = {"fashion_mnist": "Fashion-MNIST", "mnist": "MNIST", "digits": "digits"}
CONFUSION_FOR = ("hyperset", "transformer")
DEPTH_FOR = ("hyperset", "transformer")


def _split_seed(entry: str) -> tuple[str, int | None]:
    name, _, seed = entry.partition("@")
    return name, (int(seed) if seed else None)


def _train_rate(run_dir: Path) -> float:
    """Median logged training images/s (excludes evaluation and checkpointing)."""
    rates = [rec["tokens_per_s"] for rec in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if rec.get("event", "train") == "train" and "tokens_per_s" in rec]
    return float(statistics.median(rates)) if rates else float("nan")


def _device(run_dir: Path) -> str:
    """The device a run trained on (its ``run_info.json``), e.g. ``cpu`` or ``cuda:0``."""
    try:
        return str(json.loads((run_dir / "run_info.json").read_text()).get("device", "?"))
    except (OSError, ValueError):
        return "?"


#: overrides a data set needs before the user's: digits are 8x8, so the configs' 7x7 patches (a 4x4
#: grid of 28x28 images) become 2x2 patches (the same 4x4 grid)
DATASET_OVERRIDES = {"digits": ["model.patch_size=2"]}


def run_one(entry: str, dataset: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train (or reuse) one config on ``dataset``; returns its result row (also in result.json)."""
    name, seed = _split_seed(entry)
    run_name = name if seed is None else f"{name}_seed{seed}"
    ov = [f"task.dataset={dataset}", *DATASET_OVERRIDES.get(dataset, []), *overrides, f"out_dir={out / dataset}", f"name={run_name}",
          "train.progress=false", "train.tensorboard=false"] + ([f"train.seed={seed}"] if seed is not None else [])
    cfg = load_run_config(f"images/{name}", ov)
    run_dir = cfg.run_dir
    res_path = run_dir / "result.json"
    if res_path.exists():
        old = json.loads(res_path.read_text())
        if old.get("config") == to_dict(cfg):
            print(f"== {run_name} ({dataset}): reusing {res_path}", flush=True)
            return old
    print(f"== {run_name} ({dataset}): training {cfg.train.steps} steps", flush=True)
    t0 = time.perf_counter()
    res = run_experiment(cfg, overwrite=True)
    rcfg, model, task = load_trained(run_dir)
    with torch.no_grad():
        val = task.evaluate(model, "validation")
        test = task.evaluate(model, "test", per_class=True)
    row = {"name": run_name, "config_name": name, "seed": cfg.train.seed, "dataset": dataset,
           "width": rcfg.model.dim, "layers": rcfg.model.n_layers, "iterations": rcfg.model.iterations,
           "params": res.params, "val_accuracy": val["accuracy"], "test_accuracy": test["accuracy"],
           "test_loss": test["loss"], "class_acc": test["class_acc"], "confusion": test["confusion"],
           "classes": list(task.classes), "train_seconds": res.seconds, "train_images_per_s": _train_rate(run_dir),
           "steps": cfg.train.steps, "batch_size": rcfg.task.batch_size,
           "train_examples": len(task.data.train), "final_train_loss": res.loss_history[-1],
           "wall_seconds": time.perf_counter() - t0, "device": _device(run_dir), "config": to_dict(cfg)}
    res_path.write_text(json.dumps(row, indent=1))
    print(f"   {run_name}: val {100 * row['val_accuracy']:.2f}%, test {100 * row['test_accuracy']:.2f}%, "
          f"{row['wall_seconds']:.0f} s", flush=True)
    return row


def _run_in_child(args: tuple, threads: int) -> str:
    torch.set_num_threads(threads)
    run_one(*args)
    return args[0]


def run_all(entries: list[str], dataset: str, out: Path, overrides: list[str], jobs: int = 1,
            deadline: float | None = None) -> None:
    """Train ``entries`` one after the other, or ``jobs`` at a time in spawned processes; start none
    after ``deadline`` seconds (each run is reused when rerun, so a later call continues)."""
    t0 = time.perf_counter()
    late = lambda: deadline is not None and time.perf_counter() - t0 > deadline  # noqa: E731
    if jobs <= 1:
        for e in entries:
            if late():
                print(f"deadline: not starting {e}", flush=True)
                continue
            run_one(e, dataset, out, overrides)
        return
    import concurrent.futures as cf
    import multiprocessing as mp

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        pending, queue = set(), list(entries)
        while queue or pending:
            while queue and len(pending) < jobs and not late():
                e = queue.pop(0)
                fut = pool.submit(_run_in_child, (e, dataset, out, overrides), threads)
                fut.entry = e
                pending.add(fut)
            if late() and queue:
                print(f"deadline: not starting {', '.join(queue)}", flush=True)
                queue.clear()
            if pending:
                done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    if f.exception() is not None:  # one failed run does not stop the others
                        print(f"== {f.entry} ({dataset}) FAILED: {type(f.exception()).__name__}: "
                              f"{f.exception()}", flush=True)


def collect(out: Path, dataset: str) -> dict[str, dict]:
    """Every finished run of ``dataset`` under ``out``: name -> result row."""
    rows = {}
    for p in sorted((out / dataset).glob("*/result.json")):
        r = json.loads(p.read_text())
        r.setdefault("device", _device(p.parent))
        rows[r["name"]] = r
    return rows


def benchmark_sections(out: Path) -> list[str]:
    """Tables written by ``benchmarks/image_models.py --out OUT/benchmark_<name>.md``, included verbatim."""
    files = sorted(out.glob("benchmark_*.md"))
    if not files:
        return ["\n## Throughput and memory\n\n_not run: `python benchmarks/image_models.py --out "
                f"{out}/benchmark_cpu.md` writes the table this section includes._"]
    return ["\n## Throughput and memory (`benchmarks/image_models.py`)\n"] + [f.read_text() for f in files]


def results_json(out: Path, datasets: list[str], report: Path) -> None:
    """``report/results.json``: every run's row (without its config and confusion matrix) and the orderings."""
    data = {}
    for ds in datasets:
        rows = collect(out, ds)
        data[ds] = {"runs": {k: {f: v for f, v in r.items() if f not in ("config", "confusion")}
                             for k, r in rows.items()},
                    "orderings": orderings({k: v for k, v in rows.items() if "_seed" not in k})}
    (report / "results.json").write_text(json.dumps(data, indent=1))


@torch.no_grad()
def depth_curves(out: Path, dataset: str, names=DEPTH_FOR, factors=(0.5, 1.0, 1.5, 2.0),
                 examples: int = 2000) -> dict[str, dict[int, float]]:
    """Validation accuracy at other iteration counts (test-time depth), for one-layer models."""
    curves = {}
    for name in names:
        run_dir = out / dataset / name
        if not (run_dir / "result.json").exists():
            continue
        try:
            cfg, model, task = load_trained(run_dir)
        except CheckpointError as err:  # e.g. a run copied back without its full checkpoint
            print(f"depth curve of {name} ({dataset}) skipped: {err}", flush=True)
            continue
        task.cfg = task.cfg.model_copy(update={"eval_examples": examples})
        L = cfg.model.iterations
        curves[name] = {n: 100 * task.evaluate(model, "validation", iterations=n)["accuracy"]
                        for n in sorted({max(1, int(round(f * L))) for f in factors})}
    return curves


@torch.no_grad()
def hyperset_trajectory(out: Path, dataset: str, report: Path, images: int = 256) -> str:
    """Per-iteration energies, effective rank and angle of the trained Hyper-SET (Fig. 5-6), to 2L."""
    try:
        from ..analysis.hyperset import plot_energies, plot_rank_angle, trajectory
    except ImportError:  # the Hyper-SET analysis is not in this checkout
        return "_The Hyper-SET analysis functions (`analysis/hyperset.py`) are not available here._"
    trajs, lines = {}, []
    for name in ("hyperset", "transformer"):
        run_dir = out / dataset / name
        if not (run_dir / "result.json").exists():
            continue
        try:
            cfg, model, task = load_trained(run_dir)
        except CheckpointError as err:
            print(f"trajectory of {name} ({dataset}) skipped: {err}", flush=True)
            continue
        x, _ = next(iter(task.data.eval_batches("validation", images)))
        trajs[name] = trajectory(model, x, 2 * cfg.model.iterations)
    if "hyperset" not in trajs:
        return "_No trained Hyper-SET run for this data set._"
    L = load_run_config(f"images/hyperset").model.iterations
    tr = trajs["hyperset"]
    plot_energies(tr, L, report / f"energy_{dataset}.png",
                  f"Hyper-SET on {DATASET_NAMES.get(dataset, dataset)}: energy per iteration (trained with {L})")
    plot_rank_angle(trajs, L, report / f"rank_angle_{dataset}.png",
                    f"{DATASET_NAMES.get(dataset, dataset)} validation: subspace geometry per iteration")
    e = tr["e_total"]
    rises = [t for t in range(1, L + 1) if e[t] > e[t - 1]]
    lines.append(f"![energies](energy_{dataset}.png)\n\n![rank and angle](rank_angle_{dataset}.png)\n")
    lines.append(f"Total energy E_ATTN + E_FF per image at t = 0, {L // 2}, {L}, {2 * L}: "
                 f"{e[0]:.1f}, {e[L // 2]:.1f}, {e[L]:.1f}, {e[2 * L]:.1f}. Within the trained iterations it rises at "
                 f"{len(rises)} of {L} steps" + (f" (t = {', '.join(map(str, rises))})" if rises else "") + ".")
    er, ang = tr["eff_rank"], tr["angle"]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    lines.append(f"Mean effective rank per subspace: {mean(er[0]):.2f} at t = 0, {mean(er[L]):.2f} at t = {L}; "
                 f"mean average angle: {mean(ang[0]):.1f}° at t = 0, {mean(ang[L]):.1f}° at t = {L} "
                 f"(the paper, CIFAR-10: both increase over the iterations).")
    return "\n\n".join(lines)


def write_report(out: Path, report: Path, datasets: list[str], notes: str = "") -> str:
    report.mkdir(parents=True, exist_ok=True)
    text = ["# Hyper-SET on images at CPU scale (seed 002 §5.2)\n",
            "Produced by `energyformer reproduce hyperset-images` (numbers from the runs' `result.json`; the "
            "paper's columns quoted from its Tables 1, 2, 4 and 5). **The data sets differ**: the paper reports "
            "CIFAR-10/100 and ImageNet-100 after 200 epochs at widths 384-896; we train on 28x28 grey "
            "Fashion-MNIST / MNIST for a few epochs at most (each data set's section says how many) at a quarter "
            "of those widths, one seed per config. Our "
            "numbers test the *direction* of the paper's claims at small scale; they neither confirm nor refute "
            "its CIFAR numbers. The column *trained on* names the device of each run (`run_info.json`); the "
            "same config trains to the same accuracy within seed noise on either.\n", notes]
    for ds in datasets:
        rows = {k: v for k, v in collect(out, ds).items() if "_seed" not in k}
        if not rows:
            continue
        seeds = {k: v for k, v in collect(out, ds).items() if "_seed" in k}
        dn = DATASET_NAMES.get(ds, ds)
        any_row = next(iter(rows.values()))
        epochs = any_row["steps"] * any_row["batch_size"] / any_row["train_examples"]
        text.append(f"\n## {dn}\n\nTraining: {any_row['steps']} steps of {any_row['batch_size']} images "
                    f"({any_row['train_examples']} training images, {epochs:.1f} epochs), test on the official "
                    "test split.\n")
        by_dev: dict[str, list[str]] = {}
        for k, r in collect(out, ds).items():
            by_dev.setdefault(r["device"], []).append(k)
        text.append("Trained on: " + "; ".join(f"**{d}**: {', '.join(sorted(v))}" for d, v in sorted(by_dev.items()))
                    + ".\n")
        text.append("### Table 1 (single-layer recurrent-depth models) and Table 2's 12-layer transformer\n")
        text.append(table1(rows, dn))
        if seeds:
            text.append("\nSecond seed: " + "; ".join(
                f"{v['config_name']}: test {100 * v['test_accuracy']:.2f}% (seed {v['seed']}) vs "
                f"{100 * rows[v['config_name']]['test_accuracy']:.2f}% (seed {rows[v['config_name']]['seed']})"
                for v in seeds.values() if v["config_name"] in rows)
                + ". Differences between configs smaller than this spread are not meaningful.")
        text.append("\n### Table 4 (alternative energies and fixed step sizes)\n")
        text.append(table4(rows, dn))
        text.append("\n### Table 5 (depth-wise LoRA; the paper's column is ImageNet-100)\n")
        text.append(table5(rows, dn))
        if any(k in rows for k in ("hyperset_l2i6", "transformer_l2i6")):
            text.append("\n### Fig. 4 (layer-iteration trade-off at depth 12; the paper gives a figure, "
                        "CIFAR-100)\n")
            text.append(table_tradeoff(rows, dn, TRADEOFF))
        text.append("\n### The paper's orderings on these numbers\n")
        text.append(orderings_markdown(orderings(rows)))
        curves = depth_curves(out, ds)
        if curves:
            L = rows[next(iter(curves))]["iterations"]
            plot_curves(curves, report / f"depth_{ds}.png", xlabel="iterations at test time",
                        ylabel="validation accuracy (%)", title=f"{dn}: test-time depth", vline=L)
            text.append(f"\n### Accuracy over test-time iterations (validation, 2,000 images)\n\n"
                        f"![depth](depth_{ds}.png)\n\n" + "\n".join(
                            f"* {k}: " + ", ".join(f"L={n}: {v:.1f}%" for n, v in c.items()) for k, c in curves.items()))
        for name in CONFUSION_FOR:
            r = rows.get(name)
            if r is None:
                continue
            cm = torch.tensor(r["confusion"])
            plot_confusion(cm, r["classes"], report / f"confusion_{ds}_{name}.png",
                           f"{name} on {dn} test: {100 * r['test_accuracy']:.2f}%")
            text.append(f"\n### Per-class test accuracy: {name}\n\n![confusion](confusion_{ds}_{name}.png)\n\n"
                        + per_class_markdown(cm, r["classes"]))
        text.append("\n### Energy, effective rank and average angle over iterations (Fig. 5-6)\n")
        text.append(hyperset_trajectory(out, ds, report))
    text += benchmark_sections(out)
    results_json(out, datasets, report)
    body = "\n".join(text) + "\n"
    (report / "README.md").write_text(body)
    return body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="energyformer reproduce hyperset-images", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="fashion_mnist", choices=["fashion_mnist", "mnist", "digits"])
    p.add_argument("--suites", default="main,ablation,lora,tradeoff,seeds",
                   help=f"comma-separated suites ({', '.join(SUITES)}); 'none' trains nothing")
    p.add_argument("--only", nargs="+", help="train only these config names (e.g. hyperset transformer)")
    p.add_argument("--steps", type=count, help="override train.steps for every run")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override applied to every run (repeatable)")
    p.add_argument("--out", type=writable_dir("--out"), default="runs/reproduce-hyperset-images", help="folder of the runs")
    p.add_argument("--report", type=writable_dir("--report"), help="folder of README.md and the PNGs (default OUT/report)")
    p.add_argument("--report-datasets", default="fashion_mnist,mnist,digits",
                   help="data sets whose finished runs go into the report")
    p.add_argument("--note", action="append", default=[],
                   help="a markdown paragraph put under the report's introduction (repeatable), e.g. links "
                        "to related pages")
    p.add_argument("--jobs", type=count, default=1,
                   help="runs trained at the same time, each in its own process (a GPU or many cores)")
    p.add_argument("--deadline", type=positive_float,
                   help="seconds after which no new run is started (finished runs are kept; rerun to continue)")
    a = p.parse_args(argv)
    out = Path(a.out)
    overrides = list(a.overrides) + ([f"train.steps={a.steps}"] if a.steps else [])
    entries: list[str] = []
    if a.suites != "none":
        for s in a.suites.split(","):
            if s not in SUITES:
                p.error(f"--suites: unknown suite {s!r}; suites: {', '.join(SUITES)}")
            entries += [e for e in SUITES[s] if e not in entries]
    if a.only:
        entries = [e for e in entries if _split_seed(e)[0] in a.only] or list(a.only)
    run_all(entries, a.dataset, out, overrides, a.jobs, a.deadline)
    report = Path(a.report) if a.report else out / "report"
    datasets = [d for d in a.report_datasets.split(",") if (out / d).is_dir()]
    text = write_report(out, report, datasets, "\n".join(f"{n}\n" for n in a.note))
    print("\n" + text)
    print(f"wrote {report / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
