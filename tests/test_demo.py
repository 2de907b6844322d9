"""``energyformer demo``: five stages (one per system), ``--only``, progress, one report page with a figure each."""

from __future__ import annotations

import json

import pytest

from energyformer import demo
from energyformer.cli import main
from energyformer.errors import ConfigError, DataError


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


# ----------------------------------------------------------------------------- a consistent page, checks first
@pytest.fixture
def fake_train(monkeypatch):
    """Training replaced by a stub (no data, no model): ``fake_train.runs`` lists the run names trained; a run
    named in ``fake_train.stop_at`` raises KeyboardInterrupt (Ctrl-C in that run)."""
    from types import SimpleNamespace

    import energyformer.experiment as experiment

    state = SimpleNamespace(runs=[], stop_at=None)

    def run_experiment(cfg, overwrite=False):
        if f"{cfg.out_dir}/{cfg.name}".endswith(state.stop_at or "\0"):
            raise KeyboardInterrupt
        state.runs.append(f"{cfg.out_dir}/{cfg.name}")
        n = cfg.train.steps
        return SimpleNamespace(final={"eval/accuracy": 0.5 + n / 100, "eval/ppl": 9.0, "eval/bpb": 2.0},
                               params={"total": 100}, seconds=0.1, loss_history=[1.0] * n)

    monkeypatch.setattr(experiment, "run_experiment", run_experiment)
    return state


def test_an_interrupted_demo_leaves_a_page_that_matches_its_figures_and_says_how_to_go_on(tmp_path, fake_train,
                                                                                       capsys):
    """Stage 1 rewrote eqt/results.json and its figure while the page (rendered only at the end) kept the old
    table; the interrupted stage's run folder held a partial run while the page and its results.json showed the
    old one; the interrupt said nothing on how to continue."""
    out = str(tmp_path)
    assert main(["demo", "--only", "eqt", "--only", "cem", "--steps", "2", "--out", out]) == 0
    fake_train.stop_at = "cem/CEM"
    rc = main(["demo", "--only", "eqt", "--only", "cem", "--steps", "3", "--set", "train.seed=1", "--out", out])
    assert rc == 130
    page = (tmp_path / "report.md").read_text()
    eqt = page[page.index("## Equilibrium"):]
    assert "3 training steps per run" in eqt and "2 training steps" not in page
    assert f"Rerun: `energyformer demo --only eqt --steps 3 --set train.seed=1 --out {out}`" in eqt
    cem = page[page.index("## CEM vs Llama"):page.index("## Equilibrium")]
    assert "Not finished" in cem and "perplexity" not in cem and "![cem]" not in cem
    assert not (tmp_path / "cem" / "results.json").exists() and not (tmp_path / "cem" / "cem.png").exists()
    err = capsys.readouterr().err
    assert "interrupted in demo stage 'cem'" in err and f"continue with: energyformer demo --only cem --steps 3 " \
        f"--set train.seed=1 --out {out} (trains cem again from the start" in err


def test_a_set_one_selected_stage_refuses_is_refused_before_anything_trains(tmp_path, fake_train):
    with pytest.raises(ConfigError, match=r"demo stage 'eqt' \(config eqt/baseline\): unknown key 'task.seq_len'"):
        demo.main(out=str(tmp_path), steps=2, only=["cem", "eqt"], overrides=["task.seq_len=32"])
    assert fake_train.runs == [] and not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("data,says", [
    (b'{"name": "cem", "runs": {', ":1:26: not valid JSON (Expecting property name enclosed in double"),
    (json.dumps({"name": "cem", "title": "t", "headline": "h", "steps": 2, "figure": "cem.png", "runs": {}}).encode(),
     ": 'seconds' is missing"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", ":1:1: not UTF-8 text (byte 0x89"),
])
def test_a_damaged_other_stage_results_file_is_named_before_anything_trains(tmp_path, fake_train, data, says):
    (tmp_path / "cem").mkdir()
    (tmp_path / "cem" / "results.json").write_bytes(data)
    with pytest.raises(DataError) as err:
        demo.main(out=str(tmp_path), steps=2, only=["eqt"])
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'cem' / 'results.json'}{says}") and "\n" not in msg
    assert f"energyformer demo --only cem --out {tmp_path}" in msg and fake_train.runs == []


def test_a_stage_named_twice_runs_once(tmp_path, fake_train):
    assert demo.main(out=str(tmp_path), steps=2, only=["eqt", "eqt"]) == 0
    assert fake_train.runs == [f"{tmp_path}/eqt/baseline", f"{tmp_path}/eqt/EqT"]


def test_debug_gives_the_interrupts_traceback(tmp_path, fake_train, monkeypatch):
    """The demo answers Ctrl-C itself (the page and the command that continues); under --debug it raises, as every
    other command does."""
    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    fake_train.stop_at = "eqt/EqT"
    with pytest.raises(KeyboardInterrupt):
        main(["--debug", "demo", "--only", "eqt", "--steps", "2", "--out", str(tmp_path)])
    assert main(["demo", "--only", "eqt", "--steps", "2", "--out", str(tmp_path)]) == 130
