"""reproduce bare-sa is the study studies/bare-sa.yaml: its run axis holds the old program's stages with their
settings, the metric hooks fill a record from a toy-size run through the runner, the declared claims decide on
synthetic records, the page declared in the study shows its tables and sections, and the committed pages
re-render byte for byte from their records."""

import copy
import json
import shutil
from pathlib import Path

from energyformer.analysis.bare_sa import POTTS
from energyformer.experiment import load_run_config
from energyformer.reproduce import REPRODUCTIONS
from energyformer.studies import expand, load_study
from energyformer.studies.claims import evaluate
from energyformer.studies.runner import load_results

from .page_check import assert_page_rerenders

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "bare_sa"
#: a 6-site, 3-colour Potts model and a few steps (the old program's `tiny` scale)
POTTS_TINY = ["task.data.L=6", "task.data.C=3", "task.data.n_train=640", "task.data.n_test=128",
              "task.data.burn_in=50", "task.data.samples_per_chain=8", "task.n_validation=128", "task.batch_size=32",
              "task.eval_iterations=[1,2]", "task.calibrate_sequences=64", "train.steps=6", "train.eval_every=3"]
IMAGES_TINY = ["task.eval_images=16", "task.eval_steps=4", "task.report_steps=[0,1,4]", "task.nearest_train=100",
               "task.n_train=128", "train.steps=4"]


def test_the_run_axis_holds_every_stage_with_the_old_programs_settings():
    spec = load_study("bare-sa")
    plans = {p.cell["run"]: p for p in expand(spec, "cpu")}
    variants = {"bare_plain_wd", "bare_plain_frobenius", "bare_vmf", "bare_cd1", "bare_random_site",
                "bare_heads4_lr300", "bare_heads4_lr100", "bare_adam"}
    assert len(plans) == 27 and set(POTTS) | variants <= set(plans)
    assert sum(k.startswith("bare_lam") for k in plans) == 9 and sum(k.startswith("recycled_x1_lr") for k in plans) == 3
    cfg = {k: load_run_config(p.config, p.overrides) for k, p in plans.items()}
    assert cfg["bare_sa"].train.steps == 1000 and cfg["bare_sa"].train.eval_every == 100
    assert (cfg["bare_lam0.3_lr1000"].model.lam, cfg["bare_lam0.3_lr1000"].train.lr) == (0.3, 1000.0)
    assert cfg["bare_lam0.3_lr1000"].train.steps == 400 and cfg["bare_lam0.3_lr1000"].train.eval_every == 0
    assert cfg["bare_heads4_lr100"].model.heads == 4 and cfg["bare_heads4_lr100"].train.lr == 100.0
    assert cfg["bare_adam"].train.optimizer.kind == "adam"
    assert (cfg["denoise_mnist"].task.images.name, cfg["denoise_mnist"].task.patch, cfg["denoise_mnist"].task.n_train,
            cfg["denoise_mnist"].train.steps) == ("mnist", 4, 5000, 300)
    assert tuple(cfg["recycled_x3"].model.train_iterations) == (2, 4) and cfg["layers3"].model.n_layers == 3
    gpu = expand(spec, "gpu")
    assert len(gpu) == 81 and {p.seed for p in gpu} == {0, 1, 2}
    assert load_run_config(gpu[0].config, gpu[0].overrides).train.device == "cuda"


def test_toy_runs_through_the_runner_fill_the_records_and_the_page(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    spec = load_study("bare-sa").model_copy(update={"probes": {}})    # the memory probe: fresh processes, slow
    out = tmp_path / "page"
    from energyformer.studies.runner import run_study

    run_study(spec, "bare-sa", "cpu", out / "cpu", tmp_path / "runs", only={"run": ["factored", "bare_sa"]},
              sets=POTTS_TINY, log=lambda s: None)
    data = run_study(spec, "bare-sa", "cpu", out / "cpu", tmp_path / "runs", only={"run": ["denoise_digits"]},
                     sets=IMAGES_TINY, log=lambda s: None)
    bare, fac, img = (data["runs"][f"{k}-s0"]["metrics"] for k in ("bare_sa", "factored", "denoise_digits"))
    assert set(bare) == {"val", "timing", "training", "test", "nll", "recovery", "dynamics"}
    assert [p[0] for p in bare["timing"]["curve"]] == [3, 6] and 0 < bare["timing"]["train_s"]
    assert bare["test"]["qsweep"]["ce"].keys() == {"1", "2"} and len(bare["nll"]) == 128
    assert {"corr", "u_share", "nongradient_gap"} <= set(bare["recovery"]) and "no renorm" in bare["dynamics"]
    assert {"reference", "recovery"} <= set(fac) and len(fac["reference"]["bayes_nll"]) == 128
    assert len(img["denoise"]["curves"]["test, noise 0.3"]["overlap"]) == 5 and "fall" in img["denoise"]
    for png in ("potts_J.png", "potts_U.png", "digits_J.png", "digits_F.png", "digits_examples.png"):
        assert (out / "cpu" / png).stat().st_size > 1000      # figures of the trained weights, by the hooks
    assert REPRODUCTIONS["bare-sa"].main()(["--report-only", "--out", str(out)]) == 0
    text = (out / "cpu" / "README.md").read_text()
    assert "| bare_sa − factored |" not in text and "| factored − bayes | 0 |" in text   # paired, per-site NLLs
    assert "| bare_sa | default |" in text and "**digits**: p = " in text                # dynamics keys, denoising
    assert (out / "cpu" / "potts_q_sweep.png").exists() and (out / "cpu" / "digits_overlap.png").exists()
    assert (out / "cpu" / "potts_time.png").exists()


def _records() -> dict:
    return copy.deepcopy(load_results(PAGE / "cpu" / "results.json", "bare-sa", "cpu"))


def _verdicts(data: dict) -> dict[str, str]:
    rows = evaluate(load_study("bare-sa"), data["runs"], data.get("probes"))
    return {r.claim.id: str(r.outcome.verdict) for r in rows}


def test_declared_claims_decide_on_records():
    data = _records()
    assert _verdicts(data) == {
        "matches-layers": "UNDECIDED", "matches-factored": "DOES NOT HOLD", "recycling-gain": "UNDECIDED",
        "bare-like-recycled": "UNDECIDED", "fast": "UNTESTABLE", "worse-test": "HOLDS", "explainable": "HOLDS",
        "q-train-flat": "UNDECIDED", "q1-trained-depends": "HOLDS", "sensitive": "DOES NOT HOLD", "memory": "HOLDS",
        "transient-digits": "HOLDS", "transient-mnist": "HOLDS"}
    runs = {r["cell"]["run"]: r["metrics"] for r in data["runs"].values()}
    runs["layers3"]["test"]["ce"] = runs["recycled_x3"]["test"]["ce"]          # equal, but inside the band
    runs["recycled_x3"]["test"]["qsweep"]["best_more"] -= 0.1                  # a clear recycling gain
    runs["bare_sa"]["recovery"]["corr"] = 0.3                                  # couplings not readable
    runs["denoise_mnist"]["denoise"]["fall"] = 0.0                             # no transient
    for k in ("bare_lam1_lr100", "bare_lam1_lr300"):
        runs[k]["val"]["ce"] += 1.0                                            # a wide bare SA lr range
    data["probes"]["memory"]["CIFAR p=4: bare SA (N=64, d=96)"]["step_peak_bytes"] = 1
    v = _verdicts(data)
    assert (v["matches-layers"], v["recycling-gain"], v["explainable"], v["transient-mnist"], v["sensitive"],
            v["memory"]) == ("UNDECIDED", "HOLDS", "DOES NOT HOLD", "DOES NOT HOLD", "HOLDS", "DOES NOT HOLD")


def test_a_blown_up_or_diverged_sweep_run_is_marked_in_its_row(tmp_path):
    out = tmp_path / "bare_sa"
    shutil.copytree(PAGE, out)
    data = json.loads((out / "cpu" / "results.json").read_text())
    data["runs"]["bare_heads4_lr100-s0"]["metrics"]["training"]["blew_up"] = "training objective 2.3 -> 9e+20"
    data["runs"]["bare_vmf-s0"] |= {"diverged": "training diverged at step 3", "metrics": {}}
    (out / "cpu" / "results.json").write_text(json.dumps(data))
    assert REPRODUCTIONS["bare-sa"].main()(["--report-only", "--out", str(out)]) == 0
    rows = {ln.split(" | ")[0].lstrip("| "): ln.split(" | ") for ln in (out / "cpu" / "README.md").read_text().splitlines()
            if ln.startswith(("| J = sum", "| vMF"))}
    assert rows["J = sum of 4 heads K^T Q (Eq. 19), SGD lr 100"][5] == "training objective 2.3 -> 9e+20"
    assert rows["vMF-normalised"][1] == "–" and rows["vMF-normalised"][6] == "training diverged at step 3"


def test_the_page_keeps_every_table_and_section():
    text = (PAGE / "cpu" / "README.md").read_text()
    for part in ("## Setup", "## Claims", "| factored | 1.8595 | 0.0154 | 0.337 | 2.2882 |",       # Bayes, colours
                 "| 2.047 | 0.1872 | 0.2725 | 2.002 | 0.304 |",  # the five models (bare SA; its ms/step is timing)
                 "| bare_sa − recycled_x3 | 0 | 0.09009 | 0.01116 |",                               # paired
                 "| bare_sa | no renorm | 2.0002 |", "| bare_sa | 0.9774 |", "| 3 | 300 | **2.028** |",
                 "| Adam lr 0.01 | **2.023** |", "| recycled_x1_lr0.002 | 0.002 | **2.019** |",
                 "| CIFAR p=4: bare SA (N=64, d=96) | 37748736 | 144 | 573 |",
                 "| test, noise 0.3 | 0.7584 | 0.8379 | 1 | 0.7696 |", "| bare_sa | 40000 | 1000 | ", "bare SA took ",
                 "## one training step at the Potts MLM scale"):
        assert part in text, part
    for png in ("potts_q_sweep", "potts_time", "potts_J", "potts_U", "digits_overlap", "mnist_examples"):
        assert f"({png}.png)" in text and (PAGE / "cpu" / f"{png}.png").exists()


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    assert_page_rerenders(tmp_path, "bare-sa", PAGE)
    assert "gpu** — not run yet: `energyformer reproduce bare-sa --scale gpu" in (PAGE / "README.md").read_text()
