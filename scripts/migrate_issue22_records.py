"""One-off (issue 22): the committed results.json of the old ``reproduce intrinsic-lm`` / ``reproduce eqt`` /
``reproduce bare-sa`` programs -> the study runner's record format (``energyformer.studies.runner``), keeping
every number.

    python scripts/migrate_issue22_records.py intrinsic docs/results/intrinsic/cpu cpu "NOTE"
    python scripts/migrate_issue22_records.py eqt OLD_RESULTS_JSON docs/results/eqt/cpu
    python scripts/migrate_issue22_records.py bare-sa OLD_RESULTS_JSON docs/results/bare_sa/cpu

Migrated records carry ``config_hash: "migrated"``: the runner never reuses them for a new run (their
configs were resolved by older code), it only renders them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from energyformer.analysis.eqt_report import KS
from energyformer.analysis.intrinsic_report import history_points
from energyformer.studies.runner import FORMAT, save_results


def intrinsic(folder: Path, scale: str, note: str) -> None:
    old = json.loads((folder / "results.json").read_text())
    runs = {}
    for name, r in old["runs"].items():
        tps = r["tokens_per_step"]
        over = [*old.get("overrides", []), f"task.corpus={r['corpus']}", f"train.seed={r['seed']}", f"name={name}"]
        runs[name] = {
            "cell": {"variant": r["variant"], "corpus": r["corpus"]}, "seed": r["seed"],
            "config": f"intrinsic/{r['variant']}", "overrides": over, "config_hash": "migrated", "scale": scale,
            "device": "cuda" if "GPU" in r.get("hardware", "") or "H100" in r.get("hardware", "") else "cpu",
            "hardware": r.get("hardware", "x86_64 CPU, 1 thread(s), torch 2.13.0+cpu"),
            "params": r["params"], "steps": r["steps"], "seconds": r["seconds"], "tokens_per_s": r["tokens_per_s"],
            "tokens_per_step": tps, "run_dir": r["run_dir"],
            "resolved": {"task": {"corpus": r["corpus"], "batch_size": tps // 256, "seq_len": 256},
                         "model": r["model"], "train": r["train"]},
            "metrics": {"val_loss": history_points([tuple(h) for h in r["history"]], r["steps"])}}
    save_results(folder / "results.json", {"format": FORMAT, "study": "intrinsic-lm", "scale": scale,
                                           "note": note, "runs": runs})


def eqt(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce eqt`` results.json -> study records + ``overheads.json``."""
    old = json.loads(Path(old_json).read_text())
    a = old["args"]
    over = ["train.eval_every=0", "train.log_every=1", f"train.steps={a['train_steps']}", f"train.lr={a['lr']}",
            f"task.data.n_test={a['n_test']}", f"train.save_every={a['save_every']}"]
    runs, ratios = {}, {"train EqT K=2": [], "infer EqT K=8": []}
    for r in old["runs"]:
        L, s = str(r["length"]), r["seed"]
        for model in ("baseline", "eqt"):
            name = f"L{L}_seed{s}_{model}"
            acc = ({"plain": 100 * r["accuracy"]["baseline"]} if model == "baseline"
                   else {f"k{k}": 100 * r["accuracy"][f"eqt_k{k}"] for k in KS})
            met = {"accuracy": acc, "train_ce": r["curves"][model]}
            if model == "eqt":
                by = [100 * c for c in r["convergence"]]
                met["convergence"] = {"by_step": by, "k6": by[5]}
            runs[name] = {
                "cell": {"model": model, "length": L}, "seed": s, "config": f"eqt/{model}",
                "overrides": [*over, f"task.data.length={L}", f"train.seed={s}", f"name={name}"],
                "config_hash": "migrated", "scale": "cpu", "device": r["device"],
                "hardware": "x86_64 CPU, 1 thread(s)", "params": {"total": r["params"][model]},
                "steps": a["train_steps"], "seconds": r["train_seconds"][model], "tokens_per_s": None,
                "run_dir": r["run_dirs"][model],
                "resolved": {"task": {"batch_size": 32, "data": {"length": int(L), "n_test": a["n_test"]}},
                             "model": {"n_layers": 2, "dim": 64, "heads": 4, "positions": "sinusoidal"},
                             "train": {"lr": a["lr"]}},
                "metrics": met}
        ratios["train EqT K=2"] += r["timing"]["train_step_ratio"]
        ratios["infer EqT K=8"] += r["timing"]["infer_ratio_k8"]
    save_results(folder / "results.json", {"format": FORMAT, "study": "eqt", "scale": "cpu", "note": (
        f"Trained before the study runner by the old `reproduce eqt` program (the same Trainer runs; wall time "
        f"{old['seconds'] / 60:.1f} min including scoring and timing)."), "runs": runs})
    (folder / "overheads.json").write_text(json.dumps({
        "source": (f"Measured by the old `reproduce eqt` program after training, on the trained models: a training "
                   f"step (K = 2) and inference (K = 8) of both models alternated in each of "
                   f"{a['timing_repeats']} rounds per (length, seed) after one warm-up round, one CPU thread on the "
                   "shared machine; all rounds of all runs pooled. `benchmarks/eqt.py --json` now measures them."),
        "ratios": ratios}, indent=1) + "\n")


def bare_sa(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce bare-sa`` results.json (scale ``short``: the study's cpu preset)
    -> one record per run (Potts models, sweep rows, denoising runs) + the memory stage as the ``memory`` probe.
    Runs the old program did not record a config for get the study cell's (unresolved) config."""
    from energyformer.analysis.bare_sa_hooks import MAIN, VARIANTS, mlm_loss, q_summary, transient
    from energyformer.experiment import load_run_config
    from energyformer.studies import expand, load_study
    from energyformer.utils.config import to_dict

    old = json.loads(Path(old_json).read_text())
    assert old["scale"] == "short", "the cpu preset of the study is the old program's `short` scale"
    plans = {p.cell["run"]: p for p in expand(load_study("bare-sa"), "cpu")}
    runs = {}

    def record(label: str, steps: int, secs: float, params: int | None, metrics: dict, resolved: dict | None = None,
               run_dir: str = "not recorded", **extra) -> None:
        p = plans[label]
        resolved = resolved or to_dict(load_run_config(p.config, p.overrides))
        runs[p.name] = {"cell": p.cell, "seed": p.seed, "config": p.config, "overrides": p.overrides,
                        "config_hash": "migrated", "scale": "cpu", "device": "cpu",
                        "hardware": "x86_64 CPU, 1 thread(s), torch 2.13.0+cpu",
                        "params": {"total": params} if params is not None else {}, "steps": steps, "seconds": secs,
                        "tokens_per_s": None, "run_dir": run_dir,
                        "resolved": {k: resolved[k] for k in ("task", "model", "train")},
                        "metrics": {k: v for k, v in metrics.items() if v is not None}, **extra}

    def val(v: dict) -> dict:
        if "val_loss" in v:   # a sweep row
            return {"ce": v["val_loss"], "accuracy": v["val_accuracy"], "cond_loss": v["cond_loss"],
                    "bayes_loss": v["bayes_loss"]}
        return {**v, "ce": mlm_loss(v), "cond_loss": v.get("cond_loss")}

    def training(g: dict) -> dict | None:
        return ({"loss_start": g["train_loss_start"], "loss_end": g["train_loss"], "blew_up": g.get("blew_up")}
                if "train_loss" in g else None)

    P = old["potts"]
    label = {v: k for k, v in MAIN.items()}
    paired: dict[str, dict] = {}
    for pair, v in P["paired"].items():
        a, b = pair.split(" - ")
        paired.setdefault(a, {})[b] = v
    for name, m in P["models"].items():
        c = m["config"]
        rng = c["model"].get("train_iterations")
        met = {"val": val(m["val"]), "timing": {"train_s": m["train_s"], "curve": m["curve"]}, "training": training(m),
               "test": {**m["test"], "ce": mlm_loss(m["test"]),
                        **({"qsweep": q_summary(m["test"], rng)} if q_summary(m["test"], rng) else {})},
               "paired": paired.get(name)}
        if name == "factored":
            met |= {"reference": {**P["bayes"], "marginal_loss": P["marginal_loss"]}, "recovery": P["recovery_factored"]}
        if name == "bare SA":
            met |= {"recovery": {**P["recovery_bare"], "nongradient_gap": P["nongradient_gap"]},
                    "dynamics": P["bare_dynamics"]}
        record(label[name], m["steps"], m["train_s"], m["params"], met, c, f"{c['out_dir']}/{c['name']}")
    S, tags = old["sweep"], {v: k for k, v in VARIANTS.items()}
    rows = ([(f"bare_lam{g['lam']:g}_lr{g['lr']:g}", g) for g in S["bare_grid"]]
            + [(tags[g["tag"]], g) for g in S["bare_variants"]]
            + [(f"recycled_x1_lr{g['lr']:g}", g) for g in S["recycled_lr"]])
    for lab, g in rows:
        record(lab, 400, g["train_s"], None, {"val": val(g), "timing": {"train_s": g["train_s"]},
                                              "training": training(g)},
               **({"rerun": g["rerun"]} if g.get("rerun") else {}))
    for name, v in old["images"].items():
        met = {"denoise": {"curves": v["curves"], **transient(v["curves"]["test, noise 0.3"]["overlap"]),
                           "patch": v["patch"], "n_tokens": v["n_tokens"], "dim": v["dim"], "n_train": v["n_train"]},
               "timing": {"train_s": v["train_s"]}}
        record(f"denoise_{name}", v["steps"], v["train_s"], v["params"], met)
    st = old["stage_seconds"]
    save_results(folder / "results.json", {"format": FORMAT, "study": "bare-sa", "scale": "cpu", "note": (
        "Trained before the study runner by the old `reproduce bare-sa` program at its `short` scale (the same runs "
        "as the study's cpu preset; stage wall times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in st.items())
        + "; one CPU thread on a shared 2-core machine)."), "stage_seconds": st, "runs": runs,
        "probes": {"memory": old["memory"]}})


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "intrinsic":
        intrinsic(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif kind == "bare-sa":
        bare_sa(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        eqt(Path(sys.argv[2]), Path(sys.argv[3]))
