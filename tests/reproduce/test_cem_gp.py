"""reproduce cem-gp is the study studies/cem-gp.yaml: the GP task is an ordinary run config (configs/gp/),
the grid is the committed run set, the hooks measure a tiny run, claims decide on synthetic records, and
the committed pages re-render byte for byte."""

import json
from pathlib import Path

import pytest

from energyformer.analysis.gp_report import MODELS, worst_rise
from energyformer.reproduce import REPRODUCTIONS
from energyformer.studies import expand, load_study, study_path
from energyformer.studies.claims import evaluate

from .page_check import assert_page_rerenders

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "cem" / "gp"


def test_registered_and_the_grid_is_the_committed_run_set():
    assert study_path("cem-gp") is not None
    assert REPRODUCTIONS["cem-gp"].main().func.__module__ == "energyformer.studies.command"
    spec = load_study("cem-gp")
    cpu = expand(spec, "cpu")
    committed = json.loads((PAGE / "cpu" / "results.json").read_text())["runs"]
    assert {p.name for p in cpu} == set(committed) and len(cpu) == 2 * 2 * 12
    p = next(p for p in cpu if p.name == "periodic-r1-CEM-T4-learned")
    assert p.overrides[0] == "task.data_seed=1" and p.overrides[-2:] == ["train.seed=1", "name=periodic-r1-CEM-T4-learned"]
    gpu = expand(spec, "gpu")
    assert len(gpu) == 6 * 5 * 10 and {p.cell["model"] for p in gpu} == set(MODELS)


def test_run_configs_load_and_each_model_is_its_table3_block():
    from energyformer.experiment import load_run_config

    spec = load_study("cem-gp")
    for p in expand(spec, "cpu", seeds=[3]):
        cfg = load_run_config(p.config, p.overrides)
        assert cfg.task.kind == "gp" and cfg.task.kernel.name == p.cell["kernel"] and cfg.task.data_seed == 3
        assert cfg.train.steps == 4000 and cfg.task.n_train == 8000
        want = {"Plain": "gelu", "Gated": "swiglu"}.get(p.cell["model"], "cem")
        assert cfg.model.block.kind == want
        if want == "cem":
            assert cfg.model.block.steps == int(p.cell["model"].split("-")[1][1:])


def test_worst_rise():
    assert worst_rise(["CEM-T2", "CEM-T4", "CEM-T8"], [1.0, 1.5, 1.2]) == pytest.approx(0.5)
    assert worst_rise(["CEM-T2", "CEM-T4"], [1.0, 0.5]) is None


def _rec(model, kernel, seed, test):
    return {"cell": {"model": model, "kernel": kernel}, "seed": seed, "metrics": {"fit": {"test_rmse": test}}}


def test_claims_on_synthetic_records():
    spec = load_study("cem-gp")
    base = {"Plain": 0.5, "Gated": 0.4, "CEM-T1": 0.3, "CEM-T2": 0.2, "CEM-T4": 0.15, "CEM-T8": 0.16}
    recs = {f"{k}{s}{m}": _rec(m, k, s, v + 0.001 * s) for k in ("rbf", "matern") for s in (0, 1)
            for m, v in base.items()}
    rows = {(r.claim.id, r.label): r for r in evaluate(spec, recs)}
    assert {lab for _, lab in rows} == {"rbf", "matern"}
    assert str(rows[("t2-vs-t1", "rbf")].outcome.verdict) == "HOLDS"
    assert str(rows[("t4-vs-t2", "rbf")].outcome.verdict) == "HOLDS"
    assert str(rows[("not-monotonic", "rbf")].outcome.verdict) == "HOLDS"      # T4 -> T8 rises by 0.01
    assert rows[("not-monotonic", "rbf")].a == [pytest.approx(0.01), pytest.approx(0.01)]
    one = {k: v for k, v in recs.items() if v["seed"] == 0}
    assert str({(r.claim.id, r.label): r for r in evaluate(spec, one)}[("t2-vs-t1", "rbf")].outcome.verdict) == "UNDECIDED"


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    assert_page_rerenders(tmp_path, "cem-gp", PAGE)


def test_a_tiny_run_records_fit_size_and_recursion_and_renders(tmp_path):
    from energyformer.studies.command import render_pages
    from energyformer.studies.runner import run_study

    spec = load_study("cem-gp")
    tiny = ["task.n_train=60", "task.n_test=20", "task.batch_size=20", "train.steps=3"]
    data = run_study(spec, "cem-gp", "cpu", tmp_path / "page" / "cpu", tmp_path / "runs", seeds=[0],
                     only={"kernel": ["rbf"], "model": ["Gated", "CEM-T2", "CEM-T4", "CEM-T4-eta0.5"]}, sets=tiny,
                     log=lambda s: None)
    m = data["runs"]["rbf-r0-CEM-T2"]["metrics"]
    assert m["fit"]["test_rmse"] > 0 and m["size"]["params"] == 22673 and m["size"]["steps"] == 2
    assert len(m["recursion"]["energy"]) == 3 and m["recursion"]["eta"] == 1.0
    assert "recursion" not in data["runs"]["rbf-r0-Gated"]["metrics"]
    assert data["runs"]["rbf-r0-CEM-T4-eta0.5"]["metrics"]["recursion"]["eta"] == 0.5
    render_pages("cem-gp", spec, tmp_path / "page")
    page = (tmp_path / "page" / "cpu" / "README.md").read_text()
    assert "Test RMSE (paper)" in page and "| **t2-vs-t1**" in page and "### kernel = rbf" in page
    assert "| CEM-T4-eta0.5 |" in page and "| **t4-eta** " in page


def test_paper_table3_rows_are_complete():
    spec = load_study("cem-gp")
    table = next(b.table for b in spec.report["README.md"] if b.table and b.table.title == "Table 3")
    assert {(r["kernel"], r["model"]) for r in table.paper} == {
        (k, m) for k in ("rbf", "matern", "periodic", "rq", "gibbs") for m in MODELS}
