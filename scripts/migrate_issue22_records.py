"""One-off (issue 22): the committed results.json of the old ``reproduce intrinsic-lm`` / ``reproduce eqt`` /
``reproduce hyperset-sudoku`` / ``reproduce cem-lm`` / ``reproduce cem-gp`` / ``reproduce bare-sa`` programs ->
the study runner's record format (``energyformer.studies.runner``), keeping every number.

    python scripts/migrate_issue22_records.py intrinsic docs/results/intrinsic/cpu cpu "NOTE"
    python scripts/migrate_issue22_records.py eqt OLD_RESULTS_JSON docs/results/eqt/cpu
    python scripts/migrate_issue22_records.py hyperset-sudoku OLD_RESULTS_JSON docs/results/hyperset/cpu
    python scripts/migrate_issue22_records.py cem-lm docs/results/cem/lm_results.json docs/results/cem/cpu
    python scripts/migrate_issue22_records.py cem-gp docs/results/cem/gp_results.json docs/results/cem/gp/cpu
    python scripts/migrate_issue22_records.py bare-sa OLD_RESULTS_JSON docs/results/bare_sa/cpu
    python scripts/migrate_issue22_records.py hyperset-images OLD_PAGE_FOLDER docs/results/images/cpu

(the cem inputs as committed before the conversion: `git show 15d0704:docs/results/cem/lm_results.json`; the
hyperset-images folder: `results.json`, `mim.json`, `five_epochs/results.json` of docs/results/images at e9dc752.)

Migrated records carry ``config_hash: "migrated"``: the runner never reuses them for a new run (their
configs were resolved by older code), it only renders them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from energyformer.analysis.eqt_report import KS
from energyformer.analysis.intrinsic_report import history_points
from energyformer.analysis.sudoku_report import accuracies, energy_summary, geometry_summary, plateau_exit
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


def hyperset_sudoku(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce hyperset-sudoku`` results.json (one run per model, seed 0) ->
    study records; the derived claim numbers (gains, largest steps, rises) are computed from the stored ones."""
    old = json.loads(Path(old_json).read_text())
    runs = {}
    for label, model in (("hyperset", "Hyper-SET"), ("transformer", "Transformer")):
        r, name = old["models"][model], f"{label}_seed0"
        cfg, L = r["config"], r["L"]
        ex = accuracies(r["curve"], L)
        assert all(ex[k] == r[k] for k in ("board_L", "board_2L", "cell_L", "cell_2L", "board_L_ci", "board_2L_ci"))
        step, n = plateau_exit(r["eval_history"])
        t = r["trajectory"]
        met = {"extrapolation": {**ex, "seconds": r["eval_seconds"]},
               "geometry": geometry_summary(t, L),
               "training": {"eval_history": r["eval_history"], "final_loss": r["final_train_loss"],
                            "boards_per_s": r["boards_per_s_train"], "plateau_step": step, "plateau_evals": n,
                            "call_seconds": r["train_seconds_this_call"]},
               "sizes": {"step_size": r["step_size_params"], "paper_width": r["params_at_paper_width"]},
               "data": old["data"]}
        if t["e_total"][0] is not None:
            met["energy"] = energy_summary(t, L)
        runs[name] = {
            "cell": {"model": label}, "seed": 0, "config": f"hyperset/sudoku_{label}",
            "overrides": ["train.progress=false", "train.seed=0", f"name={name}"], "config_hash": "migrated",
            "scale": "cpu", "device": "cpu",
            "hardware": f"x86_64 CPU, {old['threads']} thread(s), torch {old['torch']}",
            "params": r["params"], "steps": cfg["train"]["steps"], "seconds": r["train_elapsed_s"],
            "tokens_per_s": 81 * r["boards_per_s_train"], "resumed": False, "run_dir": r["run_dir"],
            "resolved": {k: cfg[k] for k in ("task", "model", "train")}, "metrics": met}
    save_results(folder / "results.json", {"format": FORMAT, "study": "hyperset-sudoku", "scale": "cpu", "note": (
        f"Trained before the study runner by the old program (`{old['command']}`, the same Trainer runs, on "
        f"{old['machine']}); the transformer then had the GPT block (attention gpt, MLP gelu), the config now has "
        "the paper's baseline block."), "old_claims": old["claims"], "runs": runs})


def cem_lm(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce cem-lm`` lm_results.json -> ``cem-lm`` study records (cpu)."""
    old = json.loads(Path(old_json).read_text())
    runs = {}
    for r in old["runs"]:
        c, lr, s = r["config"], f"{r['lr']:g}", r["seed"]
        name = f"{c}_lr{lr}_s{s}"
        runs[name] = {
            "cell": {"model": c, "lr": lr}, "seed": s, "config": f"lm/{c}",
            "overrides": [f"train.lr={lr}", f"train.steps={r['steps']}", f"train.precision={r['precision']}",
                          f"train.seed={s}", f"name={name}"],
            "config_hash": "migrated", "scale": "cpu", "device": "cpu", "hardware": "x86_64 CPU, 1 thread(s)",
            "params": r["params"], "steps": r["steps"], "seconds": r["seconds"], "tokens_per_s": r["tokens_per_s"],
            "run_dir": r["run_dir"],
            "resolved": {"task": {"batch_size": r["tokens_per_step"] // 128, "seq_len": 128},
                         "model": {"dim": 128, "n_layers": 4, "heads": 4},
                         "train": {"lr": r["lr"], "steps": r["steps"], "precision": r["precision"]}},
            "metrics": {"val": {"loss": r["val_loss"], "ppl": r["val_ppl"], "bpb": r["val_bpb"]},
                        "history": r["history"], "unigram": r["unigram_val_ppl"]}}
    setup = old["setup"].split(" Commands:")[0].replace(", where the suite ran\n(`--at-lr 0.004`);", ", where the suite ran;")
    setup += " Recorded by the old `reproduce cem-lm` program before the study runner (the same Trainer runs)."
    save_results(folder / "results.json", {"format": FORMAT, "study": "cem-lm", "scale": "cpu", "setup": setup,
                                           "ppl_noise_half_range": old["noise"], "runs": runs})


def cem_gp(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce cem-gp`` gp_results.json -> ``cem-gp`` study records (cpu)."""
    old = json.loads(Path(old_json).read_text())
    a, info = old["args"], old["model_info"]
    files = {"Plain": "plain", "Gated": "gated"}
    runs = {}
    for r in old["runs"]:
        m, k, rep = r["model"], r["kernel"], r["rep"]
        name = f"{k}-r{rep}-{m}"
        steps = a["epochs"] * -(-a["n_train"] // a["batch_size"])
        met = {"fit": {"train_rmse": r["train_rmse"], "test_rmse": r["test_rmse"],
                       "final_train_loss": r["final_train_loss"]}, "size": info[m]}
        if r.get("recursion"):
            met["recursion"] = r["recursion"]
        runs[name] = {
            "cell": {"model": m, "kernel": k}, "seed": rep,
            "config": f"gp/{files.get(m, m.lower().replace('-', '_'))}",
            "overrides": [f"task.data_seed={r['data_seed']}", f"task.kernel.name={k}", f"task.n_train={a['n_train']}",
                          f"train.steps={steps}", "train.device=cpu", f"train.seed={r['init_seed']}", f"name={name}"],
            "config_hash": "migrated", "scale": "cpu", "device": "cpu",
            "hardware": f"x86_64 CPU, {a['threads']} thread(s), torch 2.13.0+cpu", "params": {"total": info[m]["params"]},
            "steps": steps, "seconds": r["seconds"], "tokens_per_s": None, "run_dir": r["run_dir"],
            "resolved": {"task": {"kernel": old["kernels"][k], "n_train": a["n_train"], "n_test": a["n_test"],
                                  "batch_size": a["batch_size"], "data_seed": r["data_seed"]},
                         "model": {"block": info[m]["block"], "steps": info[m]["steps"]},
                         "train": {"lr": a["lr"], "steps": steps, "seed": r["init_seed"]}},
            "metrics": met}
    setup = dict(old["setup"])
    setup["command"] = f"{setup['command']} (the old program, before the study runner; the same Trainer runs)"
    save_results(folder / "results.json", {"format": FORMAT, "study": "cem-gp", "scale": "cpu", "setup": setup,
                                           "runs": runs})


def bare_sa(old_json: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce bare-sa`` results.json (scale ``short``: the study's cpu preset)
    -> one record per run (Potts models, sweep rows, denoising runs) + the memory stage as the ``memory`` probe.
    Runs the old program did not record a config for get the study cell's (unresolved) config."""
    from energyformer.analysis.bare_sa import mlm_loss, q_summary, transient
    from energyformer.experiment import load_run_config
    from energyformer.studies import expand, load_study
    from energyformer.utils.config import to_dict

    # the old program's model names and sweep tags -> the study's run labels
    MAIN = {"factored": "factored", "bare_sa": "bare SA", "recycled_x1": "recycled x1", "recycled_x3": "recycled x3",
            "layers3": "3 layers"}
    VARIANTS = {
        "bare_plain_wd": "plain + weight decay 1e-3", "bare_plain_frobenius": "plain + Frobenius r = 5",
        "bare_vmf": "vMF-normalised", "bare_cd1": "contrastive divergence (1 step)",
        "bare_random_site": "one random site per step (Eq. 13)",
        "bare_heads4_lr300": "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 300",
        "bare_heads4_lr100": "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 100", "bare_adam": "Adam lr 0.01"}
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


def hyperset_images(old_dir: Path, folder: Path) -> None:
    """One-off (issue 22): the old ``reproduce hyperset-images`` page artifacts (``results.json`` per data set,
    ``mim.json``, ``five_epochs/results.json``) -> one record per run of the study's cpu preset. Accuracies become
    % (the study's unit); trajectories are summarised as the ``trajectory`` hook does (the old statistics are
    checked equal); the benchmark table becomes ``benchmark.md``. Classification rows did not store their
    config: they get the study cell's (unresolved) config, checked against the width / depth / batch they did store."""
    from energyformer.analysis.images_hooks import summarise
    from energyformer.experiment import load_run_config
    from energyformer.studies import expand, load_study
    from energyformer.utils.config import to_dict

    old = json.loads((old_dir / "results.json").read_text())
    five = json.loads((old_dir / "five_epochs" / "results.json").read_text())
    mim = json.loads((old_dir / "mim.json").read_text())
    plans = {(p.cell["dataset"], p.cell["model"], p.seed): p for p in expand(load_study("hyperset-images"), "cpu")}
    rows = [(ds, r["config_name"], r) for ds in ("fashion_mnist", "mnist") for r in old[ds]["runs"].values()]
    rows += [("fashion_mnist", f"{r['config_name']}_5ep", r) for r in five["fashion_mnist"]["runs"].values()]
    rows += [(r["dataset"], r["config_name"], r) for r in mim["runs"].values()]
    runs = {}
    for ds, label, r in rows:
        p = plans.pop((ds, label, r["seed"]))
        if "eval" in r:   # masked image modelling
            resolved, met = r["config"], {"mim": {**r["eval"], "split": r["split"]}}
        else:
            resolved = to_dict(load_run_config(p.config, p.overrides))
            m = resolved["model"]
            assert (m["dim"], m["n_layers"], m["iterations"], resolved["task"]["batch_size"], resolved["train"]["steps"]) \
                == (r["width"], r["layers"], r["iterations"], r["batch_size"], r["steps"]), p.name
            met = {"classify": {"val_accuracy": 100 * r["val_accuracy"], "test_accuracy": 100 * r["test_accuracy"],
                                "test_loss": r["test_loss"], "class_acc": r["class_acc"], "classes": r["classes"],
                                **({"confusion": r["confusion"]} if "confusion" in r else {}),
                                "train_examples": r["train_examples"], "train_images_per_s": r["train_images_per_s"],
                                "final_train_loss": r["final_train_loss"]}}
            if "depth" in r:
                met["depth"] = r["depth"]
            if "trajectory" in r:
                t = r["trajectory"]
                met["trajectory"] = summarise(t, r["iterations"], t["images"])
                assert all(met["trajectory"][k] == v for k, v in r["stats"].items()), p.name
        extra = {k: r[k] for k in ("git_commit", "wall_seconds") if r.get(k) is not None}
        if r.get("replaces"):
            extra["replaces"] = {**r["replaces"], **{k: 100 * r["replaces"][k] for k in ("test_accuracy", "val_accuracy")}}
        runs[p.name] = {"cell": p.cell, "seed": p.seed, "config": p.config, "overrides": p.overrides,
                        "config_hash": "migrated", "scale": "cpu", "device": r["device"],
                        "hardware": "x86_64 CPU, 1 thread(s), torch 2.13.0+cpu", "params": r["params"],
                        "steps": r["steps"], "seconds": r["train_seconds"],
                        "tokens_per_s": r.get("train_images_per_s"), "run_dir": "not recorded",
                        "resolved": {k: resolved[k] for k in ("task", "model", "train")}, "metrics": met, **extra}
    assert not plans, f"cpu runs with no old record: {sorted(p.name for p in plans.values())}"
    order = [p.name for p in expand(load_study("hyperset-images"), "cpu")]
    mr = mim["runs"]["mim_hyperset"]
    t, tr = mr["config"]["task"], mr["config"]["train"]
    setup = {
        "commands": "the old program: `energyformer reproduce hyperset-images --suites main,ablation,lora,tradeoff,seeds "
                    "--jobs 2 --out runs/images --report docs/results/images` (Fashion-MNIST), `--dataset mnist --suites "
                    "main`, `--suites none --only hyperset transformer --steps 2100` (5 epochs), `--suites mim` (the same "
                    "Trainer runs as the study's cpu preset; every run on one CPU thread, two at a time)",
        "classification": "420 steps of 128 images (54,000 training images, 1.0 epochs; the `_5ep` runs 2,100 steps, "
                          "5.0 epochs), Adam lr 1e-3 with warm-up + cosine; tested on the official test split",
        "masked image modelling": f"{t['dataset']}, {t['patch_size']}x{t['patch_size']} patches, {t['codebook_size']} "
                                  f"k-means codes; d = {mr['config']['model']['dim']}, batch {t['batch_size']}, "
                                  f"{tr['steps']} steps; {tr['optimizer']['kind']} (betas "
                                  f"{tuple(tr['optimizer']['betas'])}), wd {tr['optimizer']['weight_decay']}, clip "
                                  f"{tr['grad_clip']}, lr {tr['lr']:g} with warm-up + cosine"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchmark.md").write_text(old["page"]["benchmark_markdown"].strip() + "\n")
    save_results(folder / "results.json", {"format": FORMAT, "study": "hyperset-images", "scale": "cpu", "setup": setup,
                                           "runs": {n: runs[n] for n in order}})


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "intrinsic":
        intrinsic(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif kind == "hyperset-sudoku":
        hyperset_sudoku(Path(sys.argv[2]), Path(sys.argv[3]))
    elif kind == "cem-lm":
        cem_lm(Path(sys.argv[2]), Path(sys.argv[3]))
    elif kind == "cem-gp":
        cem_gp(Path(sys.argv[2]), Path(sys.argv[3]))
    elif kind == "hyperset-images":
        hyperset_images(Path(sys.argv[2]), Path(sys.argv[3]))
    elif kind == "bare-sa":
        bare_sa(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        eqt(Path(sys.argv[2]), Path(sys.argv[3]))
