"""reproduce cem-lm is the study studies/cem-lm.yaml: registered, its grid expands to the committed runs, its
claims decide on synthetic records as declared, and its committed pages re-render byte for byte."""

import json
import math
from pathlib import Path

import pytest

from energyformer.analysis.lm_report import akima_log2_lr, akima_loss, akima_lr, lowest
from energyformer.reproduce import REPRODUCTIONS
from energyformer.studies import expand, load_study, study_path
from energyformer.experiment import load_run_config
from energyformer.studies.claims import evaluate
from energyformer.studies.runner import config_hash

from .page_check import assert_page_rerenders

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "cem"
RATES = ["0.0005", "0.001", "0.002", "0.004", "0.008"]


def test_registered_as_a_study_and_the_cpu_grid_is_the_committed_run_set():
    assert study_path("cem-lm") is not None
    assert REPRODUCTIONS["cem-lm"].main().func.__module__ == "energyformer.studies.command"
    spec = load_study("cem-lm")
    cpu = expand(spec, "cpu")
    sweep = {p.cell["model"] for p in cpu if p.cell["lr"] != "0.004"}
    assert sweep == {"llama", "cem_full", "cem_attn_t2_dlr"} and len(cpu) == 3 * 5 + 15
    assert {p.cell["model"] for p in cpu} == set(spec.runs.axes["model"])
    committed = json.loads((PAGE / "cpu" / "results.json").read_text())["runs"]
    assert {p.name for p in cpu} <= set(committed)                 # seed 0; the 4 second seeds via --seeds 1
    assert len(expand(spec, "gpu")) == 10
    suite = expand(spec, "cpu", only={"model": ["cem_kq_none", "cem_kq_shared", "cem_kq_per_head"]})
    assert [p.name for p in suite] == [f"{m}_lr0.004_s0" for m in ("cem_kq_none", "cem_kq_shared", "cem_kq_per_head")]


def test_every_run_config_of_both_scales_loads():
    from energyformer.experiment import load_run_config

    spec = load_study("cem-lm")
    for scale in spec.scales:
        for p in expand(spec, scale):
            cfg = load_run_config(p.config, p.overrides)
            assert cfg.train.lr == float(p.cell["lr"]) and cfg.name == p.name


def test_reducers():
    assert lowest(["a", "b"], [2.0, 1.0]) == 1.0
    assert akima_loss(["0.001", "0.002"], [1.0, 2.0]) is None          # below three rates: no optimum
    lrs, losses = RATES, [5.0, 4.6, 4.4, 4.5, 4.6]
    assert akima_loss(lrs, losses) <= 4.4 and 0.001 < 2 ** akima_log2_lr(lrs, losses) < 0.004
    assert akima_lr(lrs, losses) == pytest.approx(2 ** akima_log2_lr(lrs, losses)) and akima_lr(lrs[:2], losses[:2]) is None


def _rec(model, lr, seed, loss):
    return {"cell": {"model": model, "lr": lr}, "seed": seed, "metrics": {"val": {"loss": loss}}}


def test_claims_on_synthetic_records():
    """Best-of (reduce over model), the Akima optimum (reduce over lr) and a gain (minus) decide as declared."""
    spec = load_study("cem-lm")
    recs = {}
    for i, lr in enumerate(RATES):     # llama's optimum is at 2e-3; cem_full is 1 nat worse everywhere
        recs[f"l{i}"] = _rec("llama", lr, 0, 4.4 + 0.1 * abs(i - 2))
        recs[f"f{i}"] = _rec("cem_full", lr, 0, 5.4 + 0.1 * abs(i - 2))
    for name, loss in {"cem_attn_t1": 4.5, "cem_attn_t2_diag": 4.9, "cem_attn_t2_dlr": 3.5,
                       "cem_mlp_t1": 4.5, "cem_mlp_t2_diag": 3.5, "mlp_plain_reuse": 4.5}.items():
        recs[name] = _rec(name, "0.004", 0, loss)
    rows = {r.claim.id: r for r in evaluate(spec, recs)}
    assert str(rows["4.2-attn"].outcome.verdict) == "HOLDS" and rows["4.2-attn"].a == [3.5]   # the better T=2
    assert str(rows["4.3-full"].outcome.verdict) == "DOES NOT HOLD"
    assert rows["4.3-full"].b[0] == pytest.approx(4.4, abs=0.01)
    assert str(rows["4.3-lr"].outcome.verdict) == "UNDECIDED"          # same optimum: inside one octave
    gain = rows["fig3c-gain"]                                          # T1 -> T2 gains 1 nat, reuse 0 (llama 4.5 at 4e-3)
    assert gain.a == [pytest.approx(1.0)] and gain.b == [pytest.approx(0.0)]
    assert str(gain.outcome.verdict) == "HOLDS"                        # 1.0 > band 0.567
    assert str(rows["4.4-kq"].outcome.verdict) == "UNTESTABLE"         # not run


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    out = assert_page_rerenders(tmp_path, "cem-lm", PAGE, ["README.md", "cpu/README.md"])
    rec = json.loads((PAGE / "cpu" / "results.json").read_text())
    spec = load_study("cem-lm")   # retrained by the runner on 2026-11-26: seed 0, and the 4 second seeds (--seeds 1)
    plans = {p.name: p for p in expand(spec, "cpu") + expand(spec, "cpu", seeds=[1], only={
        "model": ["llama", "cem_attn_t1", "cem_mlp_t1", "cem_mlp_t1_param_matched"], "lr": ["0.004"]})}
    assert len(plans) == 34 and set(rec["runs"]) == set(plans) and "setup" not in rec
    for n, p in plans.items():   # every record is its plan's
        assert rec["runs"][n]["config_hash"] == config_hash(load_run_config(p.config, p.overrides)), n
    assert {"loss_attention.png", "loss_mlp.png", "loss_full.png", "lr_sweep.png"} <= {p.name for p in (out / "cpu").iterdir()}


def test_the_page_is_declared_and_keeps_every_table():
    """The page is the study's report: blocks; every run at 4e-3 is a row of the main table, the sweep
    table has each seed's loss at the five rates and the per-seed Akima optimum the claims use."""
    assert load_study("cem-lm").render is None
    page = (PAGE / "cpu" / "README.md").read_text()
    for title in ("## Every model at lr = 0.004", "## Claims", "## Learning-rate sweep", "## Diagonal read-out",
                  "## Within-layer recursion and the step size"):
        assert title in page
    assert "- seeds: 0, 1\n- recorded on: x86_64 CPU, 1 thread(s)" in page   # the runner's setup list
    main = page.split("## Every model")[1].split("![")[0]
    rows = [ln for ln in main.splitlines() if ln.startswith("| cem_") or ln.startswith("| llama") or "_reuse" in ln]
    assert len(rows) == 18 and "| llama | 262.66K | 541.18K | 524.29K | 1.33M | 4.485 [4.348, 4.621] | 77.31 / 101.62 |" in main
    assert "| mlp_plain_reuse | 262.66K | 541.18K | 524.29K | 1.33M | **4.369** |" in main and "531.70" in main
    assert "| llama | 4.887 | 4.615 | 4.421 | 4.348 / 4.621 | 4.583 | 3.75e-03 | 4.347 |" in page
    assert "| cem_full | 4.978 | 4.839 | 4.934 | 4.915 | 4.985 | 9.68e-04 | 4.838 |" in page
    assert "| cem_full_alg1 | 127.51 | 4.848 |" in page and "| cem_mlp_t2_eta0.5 | 100.20 | 4.607 |" in page


def test_a_tiny_run_of_the_study_records_its_metrics_and_renders(tmp_path):
    from energyformer.studies.command import render_pages
    from energyformer.studies.runner import run_study

    spec = load_study("cem-lm")
    tiny = ["task.seq_len=16", "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1",
            "model.max_seq_len=16", "model.dim=16", "model.n_layers=1", "model.heads=2", "train.steps=3",
            "train.eval_every=3", "train.save_every=0", "train.log_every=1", "train.precision=fp32"]
    data = run_study(spec, "cem-lm", "cpu", tmp_path / "page" / "cpu", tmp_path / "runs",
                     only={"model": ["llama", "cem_attn_t1"], "lr": ["0.004"]}, sets=tiny, log=lambda s: None)
    m = data["runs"]["cem_attn_t1_lr0.004_s0"]["metrics"]
    assert math.exp(m["val"]["loss"]) == pytest.approx(m["val"]["ppl"], rel=1e-4)
    assert len(m["history"]) == 3 and m["unigram"] > 1
    render_pages("cem-lm", spec, tmp_path / "page")
    page = (tmp_path / "page" / "cpu" / "README.md").read_text()
    assert "| **4.1-attn**" in page and "| **4.4-kq**" in page and "UNTESTABLE" in page
