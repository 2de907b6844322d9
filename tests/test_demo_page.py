"""``energyformer demo`` page and verdicts, with training stubbed out (demo module docstring): what the page and
results.json record, which results files are checked, and how the verdict's seed-spread bound is taken."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from energyformer import demo
from energyformer.errors import ConfigError, DataError


@pytest.fixture
def fake_train(monkeypatch):
    """Training replaced by a stub: every run reports the same metrics (``fake_train.final``)."""
    import energyformer.experiment as experiment

    state = SimpleNamespace(runs=[], final={"eval/accuracy": 0.9, "eval/ppl": 9.0, "eval/bpb": 2.0})

    def run_experiment(cfg, overwrite=False):
        state.runs.append((f"{cfg.out_dir}/{cfg.name}", cfg.train.steps))
        return SimpleNamespace(final=dict(state.final), params={"total": 100}, seconds=0.1,
                               loss_history=[1.0] * cfg.train.steps)

    monkeypatch.setattr(experiment, "run_experiment", run_experiment)
    return state


def _results(**over) -> dict:
    res = {"name": "cem", "title": "CEM vs Llama", "steps": 5, "seconds": 3.0, "cpu_seconds": 2.0,
           "headline": "an earlier headline", "figure": "cem.png",
           "runs": {"Llama": {"config": "lm/llama", "params": 10, "seconds": 1.0, "metrics": {"eval/ppl": 5.0}}}}
    res.update(over)
    return res


def test_the_bound_is_the_largest_spread_of_either_run_over_the_fewest_seeds(monkeypatch):
    table = {"s": {"A": {"m": {"0": 0.50, "1": 0.60, "2": 0.55}}, "B": {"m": {"0": 0.40, "1": 0.42}}}}
    monkeypatch.setattr(demo, "seed_noise", lambda: table)
    bound, n = demo.noise_bound("s", demo.Compare("m", "A", "B", higher_is_better=True))
    assert bound == pytest.approx(0.10) and n == 2
    table["s"]["B"]["m"] = {"0": 0.4}  # one seed has no spread
    assert demo.noise_bound("s", demo.Compare("m", "A", "B", higher_is_better=True)) == (None, 1)


def test_a_changed_budget_says_the_spread_is_a_guide_only(monkeypatch):
    monkeypatch.setattr(demo, "seed_noise", lambda: {"s": {"A": {"m": {"0": 0.5, "1": 0.52}},
                                                           "B": {"m": {"0": 0.4, "1": 0.41}}}})
    c, m = demo.Compare("m", "A", "B", higher_is_better=True), {"A": {"m": 0.6}, "B": {"m": 0.5}}
    assert "a guide only" in demo.verdict_line("s", c, m, changed=True)
    assert "a guide only" not in demo.verdict_line("s", c, m, changed=False)


def test_a_set_train_steps_beats_the_demo_budget_and_the_page_says_so(tmp_path, fake_train):
    assert demo.main(out=str(tmp_path), steps=2, only=["eqt"], overrides=["train.steps=3"]) == 0
    assert [n for _, n in fake_train.runs] == [3, 3]
    res = json.loads((tmp_path / "eqt" / "results.json").read_text())
    assert res["steps"] == 3 and "3 training steps per run" in (tmp_path / "report.md").read_text()


def test_a_set_alone_marks_the_verdict_as_measured_at_another_budget(tmp_path, fake_train):
    assert demo.main(out=str(tmp_path), only=["eqt"], overrides=["train.seed=1"]) == 0
    res = json.loads((tmp_path / "eqt" / "results.json").read_text())
    assert res["steps"] == demo.STAGES["eqt"].steps and "a guide only" in res["verdict"], res["verdict"]
    assert demo.main(out=str(tmp_path), only=["eqt"]) == 0
    assert "a guide only" not in json.loads((tmp_path / "eqt" / "results.json").read_text())["verdict"]


def test_the_potts_model_loss_is_the_bayes_loss_plus_the_excess(tmp_path, fake_train):
    fake_train.final = {"eval/bayes_loss": 2.0, "eval/excess_loss": 0.25}
    assert demo.main(out=str(tmp_path), steps=1, only=["bare_sa"]) == 0
    res = json.loads((tmp_path / "bare_sa" / "results.json").read_text())
    assert all(r["metrics"]["eval/model_loss"] == pytest.approx(2.25) for r in res["runs"].values())


def test_rerun_commands_give_the_steps_and_only_a_non_default_out(tmp_path):
    assert demo.rerun_command(["eqt"], tmp_path, 7, ["train.seed=1"]) == \
        f"energyformer demo --only eqt --steps 7 --set train.seed=1 --out {tmp_path}"
    assert demo.rerun_command(["cem", "eqt"], demo.Path(demo.DEFAULT_OUT), None, []) == \
        "energyformer demo --only cem --only eqt"


def _llama(params) -> dict:
    return {"runs": {"Llama": {"config": "lm/llama", "params": params, "seconds": 1.0, "metrics": {}}}}


@pytest.mark.parametrize("bad, says", [({"steps": True}, "'steps' is not an integer"),
                                       ({"seconds": False}, "'seconds' is not a number"),
                                       (_llama("10"), "run 'Llama': 'params' is not an integer"),
                                       (_llama(True), "run 'Llama': 'params' is not an integer")])
def test_a_results_file_with_a_wrong_type_is_named(tmp_path, bad, says):
    (tmp_path / "cem").mkdir()
    f = tmp_path / "cem" / "results.json"
    f.write_text(json.dumps(_results(**bad)))
    with pytest.raises(DataError, match="^" + str(f).replace("\\", "\\\\") + ": " + says.replace("(", r"\(")):
        demo.read_results(f)


def test_the_selected_stages_own_damaged_results_do_not_stop_it(tmp_path, fake_train):
    (tmp_path / "eqt").mkdir()
    (tmp_path / "eqt" / "results.json").write_text("{not json")
    assert demo.main(out=str(tmp_path), steps=1, only=["eqt"]) == 0
    assert json.loads((tmp_path / "eqt" / "results.json").read_text())["steps"] == 1


def test_the_page_totals_the_time_of_every_stage_on_it(tmp_path):
    for name, secs in (("cem", 3.0), ("eqt", 4.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_results(name=name, seconds=secs, cpu_seconds=1.0)))
    page = demo.render_report(tmp_path).read_text()
    assert "Total training and evaluation time of the stages on this page: 7 s (2 s of CPU)." in page


def test_a_finished_stage_is_no_longer_shown_as_not_finished(tmp_path, fake_train):
    assert demo.main(out=str(tmp_path), steps=1, only=["eqt"]) == 0
    page = (tmp_path / "report.md").read_text()
    assert "Not finished" not in page and not (tmp_path / "eqt" / demo.UNFINISHED).exists()


@pytest.mark.parametrize("bad", ["out_dir=elsewhere", " name =x"])
def test_name_and_out_dir_are_the_demos_own(tmp_path, fake_train, bad):
    with pytest.raises(ConfigError, match="the demo names each run and its folder itself"):
        demo.main(out=str(tmp_path), only=["eqt"], overrides=[bad])
    assert fake_train.runs == []


def test_an_interrupt_in_the_first_stage_continues_with_every_stage_left(tmp_path, fake_train, capsys, monkeypatch):
    import energyformer.experiment as experiment

    real = experiment.run_experiment

    def stop_in_eqt(cfg, overwrite=False):
        if cfg.name == "EqT":
            raise KeyboardInterrupt
        return real(cfg, overwrite)

    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    monkeypatch.setattr(experiment, "run_experiment", stop_in_eqt)
    assert demo.main(out=str(tmp_path), steps=2, only=["eqt", "cem", "hyperset"]) == 130
    err = capsys.readouterr().err
    assert "interrupted in demo stage 'eqt'" in err and f"continue with: energyformer demo --only eqt --only cem " \
        f"--only hyperset --steps 2 --out {tmp_path} (trains eqt, cem, hyperset again from the start" in err, err


@pytest.mark.parametrize("x, shown", [(None, "—"), (float("nan"), "—"), (float("inf"), "—"), (0.123456, "0.123"),
                                      (12, "12")])
def test_a_missing_or_non_finite_number_is_shown_as_a_dash(x, shown):
    assert demo._f(x) == shown
