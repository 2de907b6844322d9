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
then is evaluated on the validation and test splits; its row keeps the test confusion matrix, and the
runs of :data:`RECORD_FOR` also record their test-time depth curve and their per-iteration trajectory
(energies, effective rank, average angle; Fig. 5-6) with its statistics (``analysis/classification_records.py``).
The rows are merged into the page folder's ``results.json`` (``--report``, default ``OUT/report``), and
the page is rendered from that file alone (``analysis/classification_page.py``): tables beside the
paper's, every claim with its verdict (``analysis/classification_claims.py``), the figures.
``--report-only --out DIR`` trains nothing and re-renders DIR's pages (README.md, mim.md, and those of
its subfolders) from DIR's committed artifacts. The paper trains 200 epochs on CIFAR at widths 384-896;
we train about one epoch of a 28x28 set at a quarter of those widths, so only directions are compared.
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

from ..analysis.classification_claims import seed_noise
from ..analysis.classification_page import render_folder
from ..analysis.classification_records import depth_curve, geometry_record, trajectory_stats
from ..errors import DataError
from ..experiment import load_run_config, load_trained, run_experiment
from ..utils.cliargs import count, positive_float
from ..utils.config import to_dict
from ..utils.paths import writable_dir

SUITES: dict[str, list[str]] = {
    "main": ["transformer", "transformer_12layer", "et", "crate", "crate_t", "crate_t_code", "hyperset",
             "hyperset_wide"],
    "ablation": ["hyperset", "hyperset_sigmoid", "hyperset_linear", "hyperset_ff_softmax", "hyperset_ff_gated",
                 "hyperset_fixed05", "hyperset_fixed01"],
    "lora": ["hyperset", "hyperset_lora4", "hyperset_lora8", "hyperset_lora16", "hyperset_lora32"],
    "tradeoff": ["hyperset", "hyperset_l2i6", "hyperset_l4i3", "transformer", "transformer_l2i6",
                 "transformer_l4i3", "transformer_12layer"],
    "seeds": ["hyperset@1", "transformer@1"],
    # Table 3's stand-in (masked image modelling on k-means patch codes; its page is mim.md), second seeds
    # of the two 1 / 12 models for the noise band
    "mim": ["mim_transformer", "mim_hyperset", "mim_hyperset_wide", "mim_transformer@1", "mim_hyperset@1"],
}
#: configs whose runs (every seed) record a depth curve and a trajectory (Fig. 5-6)
RECORD_FOR = ("hyperset", "transformer")
#: validation images of a depth curve; validation images of a trajectory
DEPTH_EXAMPLES, TRAJECTORY_IMAGES = 2000, 256


def _split_seed(entry: str) -> tuple[str, int | None]:
    name, _, seed = entry.partition("@")
    return name, (int(seed) if seed else None)


def _train_rate(run_dir: Path) -> float:
    """Median logged training images/s (excludes evaluation and checkpointing)."""
    rates = [rec["tokens_per_s"] for rec in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if rec.get("event", "train") == "train" and "tokens_per_s" in rec]
    return float(statistics.median(rates)) if rates else float("nan")


def _run_info(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "run_info.json").read_text())
    except (OSError, ValueError):
        return {}


def _device(run_dir: Path) -> str:
    """The device a run trained on (its ``run_info.json``), e.g. ``cpu`` or ``cuda:0``."""
    return str(_run_info(run_dir).get("device", "?"))


#: overrides a data set needs before the user's: digits are 8x8, so the classifiers' 7x7 patches (a 4x4
#: grid of 28x28 images) become 2x2 patches (the same 4x4 grid); the masked-image configs' 4x4 codes
#: become 2x2 (a 4x4 grid of codes instead of 7x7)
DATASET_OVERRIDES = {"digits": ["model.patch_size=2"]}
MIM_DATASET_OVERRIDES = {"digits": ["task.patch_size=2"]}


def dataset_overrides(name: str, dataset: str) -> list[str]:
    """The overrides config ``name`` needs on ``dataset`` (:data:`DATASET_OVERRIDES`)."""
    table = MIM_DATASET_OVERRIDES if name.startswith("mim_") else DATASET_OVERRIDES
    return [f"task.dataset={dataset}", *table.get(dataset, [])]


@torch.no_grad()
def add_records(row: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``row`` with the trained model's depth curve (validation accuracy at 0.5-2x its iterations,
    :data:`DEPTH_EXAMPLES` images), its trajectory to 2L on :data:`TRAJECTORY_IMAGES` validation images
    and the trajectory's statistics (:func:`~energyformer.analysis.classification_records.trajectory_stats`)."""
    cfg, model, task = load_trained(run_dir)
    L = cfg.model.iterations
    x, _ = next(iter(task.data.eval_batches("validation", TRAJECTORY_IMAGES)))
    record = geometry_record(model, x, 2 * L)
    task.cfg = task.cfg.model_copy(update={"eval_examples": DEPTH_EXAMPLES})
    depth = depth_curve(lambda n: task.evaluate(model, "validation", iterations=n)["accuracy"], L)
    return {**row, "depth": {**depth, "split": "validation", "examples": DEPTH_EXAMPLES},
            "trajectory": record, "stats": trajectory_stats(record, L)}


def run_mim_one(entry: str, dataset: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train (or reuse) one masked-image-modelling config; its row (``OUT/mim/<dataset>/<name>/result.json``)
    has the validation metrics of ``task.evaluate`` (masked CE and accuracy, decoded accuracy, PSNR,
    SSIM, the unigram floor and tokeniser ceiling) and the run's config."""
    name, seed = _split_seed(entry)
    run_name = name if seed is None else f"{name}_seed{seed}"
    ov = [*dataset_overrides(name, dataset), *overrides, f"out_dir={out / 'mim' / dataset}", f"name={run_name}",
          "train.progress=false", "train.tensorboard=false"] + ([f"train.seed={seed}"] if seed is not None else [])
    cfg = load_run_config(f"images/{name}", ov)
    res_path = cfg.run_dir / "result.json"
    if res_path.exists() and (old := json.loads(res_path.read_text())).get("config") == to_dict(cfg):
        print(f"== {run_name} ({dataset}): reusing {res_path}", flush=True)
        return old
    print(f"== {run_name} ({dataset}): training {cfg.train.steps} steps", flush=True)
    res = run_experiment(cfg, overwrite=True)
    _, model, task = load_trained(cfg.run_dir)
    metrics = task.evaluate(model, "validation")
    row = {"name": run_name, "config_name": name, "seed": cfg.train.seed, "dataset": dataset, "split": "validation",
           "params": res.params, "eval": metrics, "train_seconds": res.seconds, "steps": cfg.train.steps,
           "device": _device(cfg.run_dir), "git_commit": (_run_info(cfg.run_dir).get("git") or {}).get("commit"),
           "config": to_dict(cfg)}
    res_path.write_text(json.dumps(row, indent=1))
    print(f"   {run_name}: {task.format_metrics(metrics)}", flush=True)
    return row


def run_one(entry: str, dataset: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train (or reuse) one config on ``dataset``; returns its result row (also in result.json).

    A reused run of :data:`RECORD_FOR` that lacks its records gets them from its checkpoint."""
    if entry.startswith("mim_"):
        return run_mim_one(entry, dataset, out, overrides)
    name, seed = _split_seed(entry)
    run_name = name if seed is None else f"{name}_seed{seed}"
    ov = [*dataset_overrides(name, dataset), *overrides, f"out_dir={out / dataset}", f"name={run_name}",
          "train.progress=false", "train.tensorboard=false"] + ([f"train.seed={seed}"] if seed is not None else [])
    cfg = load_run_config(f"images/{name}", ov)
    run_dir = cfg.run_dir
    res_path = run_dir / "result.json"
    if res_path.exists():
        old = json.loads(res_path.read_text())
        if old.get("config") == to_dict(cfg):
            print(f"== {run_name} ({dataset}): reusing {res_path}", flush=True)
            if name in RECORD_FOR and "trajectory" not in old:
                old = add_records(old, run_dir)
                old.setdefault("git_commit", (_run_info(run_dir).get("git") or {}).get("commit"))
                res_path.write_text(json.dumps(old, indent=1))
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
           "wall_seconds": time.perf_counter() - t0, "device": _device(run_dir),
           "git_commit": (_run_info(run_dir).get("git") or {}).get("commit"), "config": to_dict(cfg)}
    if name in RECORD_FOR:
        row = add_records(row, run_dir)
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


def benchmark_markdown(out: Path) -> str | None:
    """Tables written by ``benchmarks/image_models.py --out OUT/benchmark_<name>.md``, joined (None: none)."""
    files = sorted(out.glob("benchmark_*.md"))
    return "\n".join(f.read_text() for f in files) if files else None


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None


def write_mim(out: Path, report: Path) -> dict[str, Any] | None:
    """Merge the masked-image-modelling runs under ``OUT/mim/`` into ``report/mim.json`` (None: no runs)."""
    rows = {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "mim").glob("*/*/result.json"))}
    if not rows:
        return None
    path = report / "mim.json"
    data = _load(path)
    data.setdefault("runs", {}).update(rows)
    data["runs"] = dict(sorted(data["runs"].items()))
    report.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def write_results(out: Path, datasets: list[str], report: Path, notes: list[str] | None = None,
                  noise_from: Path | None = None) -> dict[str, Any]:
    """Merge the finished runs under ``out`` into ``report/results.json`` (the page's one artifact).

    A run's row replaces the committed row of the same name wholly (its accuracy and its records come
    from one run); when the committed row had another test or validation accuracy, the new row keeps them under
    ``replaces`` so the page can say so. Rows of runs not under ``out`` stay as committed. ``notes``
    (markdown paragraphs under the page's introduction) replace the stored ones when given;
    ``noise_from`` (another page's results.json) stores that page's seed spreads as this page's
    declared noise band. Run configs are left out (each run's ``config.yaml`` has it)."""
    path = report / "results.json"
    data = _load(path)
    page = data.setdefault("page", {})
    if notes:
        page["notes"] = list(notes)
    if (bench := benchmark_markdown(out)) is not None:
        page["benchmark_markdown"] = bench
    if noise_from is not None:
        other = _load(noise_from)
        for ds, d in other.items():
            if ds != "page" and (n := seed_noise(d.get("runs", {}))):
                page["noise"] = {"values": n, "source": f"seed spread of `{noise_from.as_posix()}` ({ds})"}
                break
    for ds in datasets:
        runs = data.setdefault(ds, {}).setdefault("runs", {})
        for name, row in collect(out, ds).items():
            row = {k: v for k, v in row.items() if k != "config"}
            old = runs.get(name)
            if old is not None and any(old.get(k) != row[k] for k in ("test_accuracy", "val_accuracy")):
                row["replaces"] = old.get("replaces") or {
                    k: old.get(k) for k in ("test_accuracy", "val_accuracy", "git_commit")}
            runs[name] = row
        data[ds] = {"runs": dict(sorted(runs.items()))}
    report.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


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
    p.add_argument("--out", type=writable_dir("--out"), default="runs/reproduce-hyperset-images",
                   help="folder of the runs; with --report-only: the page folder to re-render")
    p.add_argument("--report", type=writable_dir("--report"),
                   help="page folder: its results.json is updated with the runs and its README.md re-rendered "
                        "(default OUT/report)")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing, read no runs: re-render the pages of --out (README.md, mim.md, and "
                        "those of its subfolders) from the artifacts committed there")
    p.add_argument("--report-datasets", default="fashion_mnist,mnist,digits",
                   help="data sets whose finished runs go into the report")
    p.add_argument("--note", action="append", default=[],
                   help="a markdown paragraph put under the page's introduction (repeatable; stored in "
                        "results.json, replacing the stored notes), e.g. links to related pages")
    p.add_argument("--noise-from", type=Path, metavar="RESULTS_JSON",
                   help="another page's results.json whose seed spread is this page's declared noise band "
                        "(for a page whose configs have one seed each)")
    p.add_argument("--jobs", type=count, default=1,
                   help="runs trained at the same time, each in its own process (a GPU or many cores)")
    p.add_argument("--deadline", type=positive_float,
                   help="seconds after which no new run is started (finished runs are kept; rerun to continue)")
    a = p.parse_args(argv)
    out = Path(a.out)
    if a.report_only:
        if a.report or a.note or a.noise_from or a.only or a.steps or a.overrides:
            p.error("--report-only re-renders --out from its committed artifacts; it takes no --report, --note, "
                    "--noise-from, --only, --steps or --set")
        written = render_folder(out)
        if not written:
            raise DataError(f"--report-only: no results.json or mim.json in {out} or its subfolders; nothing to "
                            "re-render (run without --report-only first)")
        print("\n".join(f"wrote {w}" for w in written))
        return 0
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
    if datasets:
        write_results(out, datasets, report, a.note, a.noise_from)
    write_mim(out, report)
    for w in render_folder(report, recurse=False):
        print(f"wrote {w}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
