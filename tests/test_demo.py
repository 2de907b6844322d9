"""``energyformer demo``: five stages (one per system), ``--only``, progress, one report page with a figure each."""

from __future__ import annotations

import json

import pytest

from energyformer import demo
from energyformer.cli import main
from energyformer.errors import ConfigError


def test_five_systems_each_against_its_baseline():
    assert list(demo.STAGES) == ["cem", "intrinsic", "hyperset", "eqt", "bare_sa"]
    pairs = {n: [r.config for r in s.runs] for n, s in demo.STAGES.items()}
    assert pairs["cem"] == ["lm/llama", "lm/cem_full"]
    assert pairs["intrinsic"] == ["intrinsic/mha", "intrinsic/nag_mha"]
    assert pairs["hyperset"] == ["hyperset/sudoku_hyperset", "hyperset/sudoku_transformer"]
    assert pairs["eqt"] == ["eqt/baseline", "eqt/eqt"]
    assert pairs["bare_sa"] == ["bare_sa/potts_bare_sa", "bare_sa/potts_recycled_x3"]
    assert ("eval/cell_accuracy@16", "cell acc. @16", False) in demo.STAGES["hyperset"].metrics  # beyond training
    assert demo.STAGES["bare_sa"].reference[0] == "eval/bayes_loss"


@pytest.mark.slow
def test_only_one_stage_runs_and_the_report_keeps_the_others(tmp_path, capsys):
    other = tmp_path / "cem"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({
        "name": "cem", "title": "CEM vs Llama", "steps": 5, "seconds": 3.0, "cpu_seconds": 2.0,
        "headline": "an earlier headline", "figure": "cem.png",
        "runs": {"Llama": {"config": "lm/llama", "params": 10, "seconds": 1.0, "metrics": {"eval/ppl": 5.0}}}}))
    rc = main(["demo", "--only", "eqt", "--out", str(tmp_path), "--steps", "2", "--set", "task.data.n_test=32",
               "--set", "train.progress=false"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "[1/1] Equilibrium transformer vs baseline" in out and "[eqt 2/2] EqT" in out
    res = json.loads((tmp_path / "eqt" / "results.json").read_text())
    assert set(res["runs"]) == {"baseline", "EqT"} and all(len(r["loss_history"]) == 2 for r in res["runs"].values())
    assert (tmp_path / "eqt" / "eqt.png").stat().st_size > 0
    page = (tmp_path / "report.md").read_text()
    assert page.index("## CEM vs Llama") < page.index("## Equilibrium transformer") and "an earlier headline" in page
    assert "![eqt](eqt/eqt.png)" in page and "energyformer demo --only eqt" in page


def test_unknown_stage_is_a_one_line_error():
    with pytest.raises(ConfigError, match="--only 'cemm': unknown demo stage; allowed: cem, intrinsic"):
        demo.main(only=["cemm"])
