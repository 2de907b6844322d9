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
    assert "**EqT higher accuracy than baseline: " in page and "a guide only for this changed run" in page


def test_the_page_records_the_steps_that_ran_and_name_or_out_dir_are_refused(tmp_path, capsys):
    """--set train.steps=3 beside --steps 2 trained 3 while the page said 2; --set name= trained both runs of a
    stage into one folder (the baseline lost)."""
    rc = main(["demo", "--only", "eqt", "--out", str(tmp_path), "--steps", "2", "--set", "train.steps=3",
               "--set", "task.data.n_test=32", "--set", "train.progress=false"])
    assert rc == 0 and "EqT: eqt/eqt, 3 steps" in capsys.readouterr().out
    res = json.loads((tmp_path / "eqt" / "results.json").read_text())
    assert res["steps"] == 3 and all(len(r["loss_history"]) == 3 for r in res["runs"].values())
    for bad in ("name=same", "out_dir=/tmp/x"):
        with pytest.raises(ConfigError, match=f"--set {bad}: the demo names each run and its folder itself"):
            demo.main(out=str(tmp_path), only=["eqt"], overrides=[bad])


def test_unknown_stage_is_a_one_line_error():
    with pytest.raises(ConfigError, match="--only 'cemm': unknown demo stage; allowed: cem, intrinsic"):
        demo.main(only=["cemm"])


# ----------------------------------------------------------------------------- verdicts by the seed spread
def test_every_stage_compares_two_of_its_runs_with_a_recorded_seed_spread():
    for name, stage in demo.STAGES.items():
        c = stage.compare
        assert c is not None and {c.a, c.b} <= {r.label for r in stage.runs}, name
        bound, n = demo.noise_bound(name, c)
        assert bound is not None and bound > 0 and n >= 3, (name, bound, n)


@pytest.fixture
def noise(monkeypatch):
    table = {"s": {"A": {"eval/acc": {"0": 0.50, "1": 0.52}}, "B": {"eval/acc": {"0": 0.40, "1": 0.41}}}}
    monkeypatch.setattr(demo, "seed_noise", lambda: table)


@pytest.mark.parametrize("a,b,verdict", [(0.60, 0.50, "HOLDS"), (0.50, 0.49, "UNDECIDED"), (0.40, 0.50, "DOES NOT HOLD")])
def test_a_single_seed_margin_is_decided_only_beyond_the_seed_spread(noise, a, b, verdict):
    c = demo.Compare("eval/acc", "A", "B", higher_is_better=True)
    line = demo.verdict_line("s", c, {"A": {"eval/acc": a}, "B": {"eval/acc": b}})
    assert line.startswith(f"**A higher acc than B: {verdict}**") and "beyond 0.02" in line


def test_both_runs_at_chance_is_untestable(noise):
    c = demo.Compare("eval/acc", "A", "B", higher_is_better=True, chance=0.5, at_band=0.01)
    line = demo.verdict_line("s", c, {"A": {"eval/acc": 0.505}, "B": {"eval/acc": 0.498}})
    assert "UNTESTABLE" in line and "chance" in line


def test_no_recorded_spread_is_undecided_not_a_verdict(noise):
    c = demo.Compare("eval/acc", "A", "C", higher_is_better=True)
    assert "UNDECIDED" in demo.verdict_line("s", c, {"A": {"eval/acc": 0.9}, "C": {"eval/acc": 0.1}})


def test_seed_spread_script_collects_seeds_from_demo_folders(tmp_path, load_script):
    mod = load_script("scripts/demo_seed_spread.py")
    for seed, folder in ((0, "d0"), (1, "d1")):
        (tmp_path / folder / "eqt").mkdir(parents=True)
        over = [] if seed == 0 else [f"train.seed={seed}"]
        (tmp_path / folder / "eqt" / "results.json").write_text(json.dumps({"name": "eqt", "runs": {
            "EqT": {"overrides": over, "metrics": {"eval/accuracy": 0.8 + seed / 10}}}}))
    out = tmp_path / "noise.json"
    assert mod.main(["--from", str(tmp_path / "d0"), str(tmp_path / "d1"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["stages"] == {"eqt": {"EqT": {"eval/accuracy": {"0": 0.8, "1": 0.9}}}}
