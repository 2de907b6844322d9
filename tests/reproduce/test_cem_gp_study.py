"""reproduce cem-gp --study: the recursion-depth variants are built as named and reported with diagnostics."""

import json

from energyformer.models.regressor import GPRegressor, RegressorConfig
from energyformer.reproduce.cem_gp import STUDY_SPECS, main


def test_study_specs_change_one_thing_each():
    t8 = {n: s for n, s in STUDY_SPECS.items() if n.startswith("CEM-T8")}
    assert set(t8) == {"CEM-T8-eta0.25", "CEM-T8-learned", "CEM-T8-exact"}
    m = GPRegressor(t8["CEM-T8-learned"])
    assert m.block.steps == 8 and any("step_size" in n for n, _ in m.named_parameters())
    assert not GPRegressor(t8["CEM-T8-exact"]).block.norm_in_loop
    assert GPRegressor(RegressorConfig(block={"kind": "cem", "steps": 8})).block.norm_in_loop  # default: Algorithm 1
    assert float(GPRegressor(t8["CEM-T8-eta0.25"]).block.solver.step_size(0, None, None)) == 0.25


def test_tiny_study_reports_table_claims_and_recursion_trace(tmp_path):
    report = tmp_path / "docs" / "gp.md"
    assert main(["--reps", "1", "--epochs", "1", "--n-train", "200", "--n-test", "50", "--kernels", "rbf",
                 "--models", "CEM-T1", "CEM-T2", "CEM-T4", "CEM-T8", "--study", "--study-kernels", "rbf",
                 "--out", str(tmp_path / "out"), "--report", str(report)]) == 0
    text = report.read_text()
    assert "T4 and T8 not worse than T2" in text and "recursion-depth study" in text
    assert (report.parent / "gp_findings.md").exists()
    assert "| CEM-T8-exact |" in text and "energy per step" in text
    assert (report.parent / "gp_recursion.png").stat().st_size > 1000
    res = json.loads((report.parent / "gp_results.json").read_text())
    rec = next(r for r in res["runs"] if r["model"] == "CEM-T8")
    assert len(rec["recursion"]["energy"]) == 9 and len(rec["recursion"]["step_norm"]) == 8
