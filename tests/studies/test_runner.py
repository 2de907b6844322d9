"""The one study runner: runs through run_experiment, reuses finished runs, resumes interrupted ones,
retrains a changed config, runs --jobs 2 in separate processes; the page renders from the records."""

import json
import shutil

import pytest

import energyformer.experiment as experiment
from energyformer.studies import load_study
from energyformer.studies.command import main as study_main
from energyformer.studies.runner import run_study

from .tiny import write


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The tiny study run once (seed 0, baseline + EqT); later tests copy its output."""
    root = tmp_path_factory.mktemp("study")
    spec = load_study(write(root / "tiny.yaml"))
    data = run_study(spec, "tiny", "cpu", root / "out", root / "runs", log=lambda s: None)
    return spec, root, data


def test_runs_are_run_experiment_runs_with_records(study):
    spec, root, data = study
    assert sorted(data["runs"]) == ["L8_s0_baseline", "L8_s0_eqt"]
    eqt = data["runs"]["L8_s0_eqt"]
    assert eqt["cell"] == {"model": "eqt", "length": "8"} and eqt["seed"] == 0 and eqt["scale"] == "cpu"
    assert eqt["device"] == "cpu" and "CPU" in eqt["hardware"] and eqt["steps"] == 3
    assert set(eqt["metrics"]["accuracy"]) == {"k0", "k8", "k32"} and len(eqt["metrics"]["train_ce"]) == 3
    assert len(eqt["metrics"]["convergence"]["by_step"]) == 32
    assert "convergence" not in data["runs"]["L8_s0_baseline"]["metrics"]   # the hook returned None
    for name in data["runs"]:   # each run is a Trainer run directory
        d = root / "runs" / name
        assert (d / "metrics.jsonl").exists() and list(d.glob("ckpt-*/model.safetensors"))
    assert json.loads((root / "out" / "results.json").read_text()) == data


def test_second_call_reuses_every_finished_run(study, tmp_path, monkeypatch):
    spec, root, data = study
    shutil.copytree(root / "out", tmp_path / "out")
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("retrained"))
    log = []
    again = run_study(spec, "tiny", "cpu", tmp_path / "out", root / "runs", log=log.append)
    assert again == data and sum("reusing" in line for line in log) == 2


def test_changed_config_trains_again(study, tmp_path):
    spec, root, data = study
    shutil.copytree(root / "out", tmp_path / "out")
    shutil.copytree(root / "runs", tmp_path / "runs")
    log = []
    new = run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", sets=["train.lr=1e-4"],
                    only={"model": ["baseline"]}, log=log.append)
    assert any("config changed" in line for line in log)
    # its checkpoint is of the old config: the log said "its checkpoint has all 3 steps: evaluating and recording it"
    # and then trained it from scratch (probe W)
    assert "== L8_s0_baseline: its checkpoint is of another config: training 3 steps from scratch (1/1)" in log, log
    rec = new["runs"]["L8_s0_baseline"]
    assert rec["config_hash"] != data["runs"]["L8_s0_baseline"]["config_hash"] and not rec["resumed"]
    assert rec["resolved"]["train"]["lr"] == 1e-4


def test_an_interrupted_run_resumes_from_its_checkpoint(study, tmp_path):
    """A run directory with a checkpoint and no record (the process died before recording): resumed."""
    spec, root, data = study
    shutil.copytree(root / "runs", tmp_path / "runs")
    out = tmp_path / "out"
    out.mkdir()
    rec = {**data, "runs": {"L8_s0_eqt": data["runs"]["L8_s0_eqt"]}}
    (out / "results.json").write_text(json.dumps(rec))
    log = []
    new = run_study(spec, "tiny", "cpu", out, tmp_path / "runs", log=log.append)
    # the log says what happens to it (it said "training N steps" though nothing was trained again)
    assert any(line.startswith("== L8_s0_baseline: its checkpoint has all ") and "evaluating and recording it" in line
               for line in log), log
    b = new["runs"]["L8_s0_baseline"]
    assert b["resumed"] and b["metrics"]["accuracy"] == data["runs"]["L8_s0_baseline"]["metrics"]["accuracy"]
    info = json.loads((tmp_path / "runs" / "L8_s0_baseline" / "run_info.json").read_text())
    assert info.get("resumes")
    # its speed is the run's own (every token over its training time across resumes, which the resumed call
    # only lengthens by its final evaluation), not every token over the seconds of the call that resumed and
    # recorded it (that inflated it ~50x in a committed page); both are wall-clock speeds of calls made at
    # different times, so the bound is loose (a loaded machine moves them by less than 5x, not 50x)
    first = data["runs"]["L8_s0_baseline"]
    assert 0.2 < b["tokens_per_s"] / first["tokens_per_s"] < 5
    assert b["tokens_per_s"] == pytest.approx(first["tokens_per_s"] * first["seconds"] / b["seconds"])  # same tokens


@pytest.mark.slow
def test_jobs_2_trains_in_separate_processes(tmp_path):
    spec = load_study(write(tmp_path / "tiny.yaml", seeds=[0, 1]))
    log = []
    data = run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", jobs=2, log=log.append)
    assert len(data["runs"]) == 4 and sum("queued" in line for line in log) == 4
    assert json.loads((tmp_path / "out" / "results.json").read_text())["runs"].keys() == data["runs"].keys()


def test_command_report_only_renders_from_records_alone(study, tmp_path, monkeypatch):
    spec, root, data = study
    page = tmp_path / "page"
    shutil.copytree(root / "out", page / "cpu")
    monkeypatch.setattr("energyformer.studies.command.load_study", lambda name: spec)
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    index = (page / "README.md").read_text()
    assert "[cpu/README.md](cpu/README.md)" in index and "not run yet: `energyformer reproduce tiny --scale gpu" in index
    text = (page / "cpu" / "README.md").read_text()
    assert "| **gain** EqT beats the baseline | 4.66 (Table 2) |" in text and "paired by seed" in text
    first = {p.name: p.read_text() for p in page.rglob("*.md")}
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    assert {p.name: p.read_text() for p in page.rglob("*.md")} == first       # deterministic


def test_pages_name_records_the_study_would_train_again_or_no_longer_runs(study, tmp_path, monkeypatch):
    """A record whose config hash differs from what the study resolves to now (a changed default, recipe, or a
    run made with --set) and one that is not a run of the scale's grid are named on the scale page and the index
    ("Out of date"); current records are not, and a page of current records says nothing about it."""
    spec, root, data = study
    page = tmp_path / "page"
    shutil.copytree(root / "out", page / "cpu")
    monkeypatch.setattr("energyformer.studies.command.load_study", lambda name: spec)
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    assert "Out of date" not in (page / "cpu" / "README.md").read_text() + (page / "README.md").read_text()
    edited = json.loads((page / "cpu" / "results.json").read_text())
    edited["runs"]["L8_s0_eqt"]["config_hash"] = "0" * 16
    edited["runs"]["L64_s0_eqt"] = {**edited["runs"]["L8_s0_eqt"], "cell": {"model": "eqt", "length": "64"}}
    (page / "cpu" / "results.json").write_text(json.dumps(edited))
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    want = ("**Out of date:** 1 of these records were made with a configuration that differs from the one the study "
            "resolves to now, so `reproduce` would train them again (`L8_s0_eqt`); 1 are not runs of the scale's "
            "current grid and seeds (`L64_s0_eqt`).")
    assert want in (page / "cpu" / "README.md").read_text() and want in (page / "README.md").read_text()
    # a record under a grid run's name whose cell names another label was its own table row, with no note
    edited["runs"]["L8_s0_eqt"]["cell"] = {"model": "bogus", "length": "8"}
    (page / "cpu" / "results.json").write_text(json.dumps(edited))
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    assert "2 are not runs of the scale's current grid and seeds (`L8_s0_eqt`, `L64_s0_eqt`)" in \
        (page / "cpu" / "README.md").read_text()


def test_a_migrated_record_is_never_called_out_of_date(study):
    """A record migrated from the old program (config hash 'migrated', made outside this grid's names) says so on its
    own page; it is none of outdated_records' lists (a mutant that judged it survived)."""
    import copy

    from energyformer.studies.runner import outdated_records

    spec, _, data = study
    runs = copy.deepcopy(data["runs"])
    runs["L8_s0_eqt"]["config_hash"] = "migrated"
    runs["old_name"] = {**runs["L8_s0_baseline"], "config_hash": "migrated"}
    assert outdated_records(spec, "cpu", runs) == ([], [], {})


def test_a_record_made_with_set_is_named_with_its_overrides_not_called_out_of_date(study, tmp_path, monkeypatch):
    """`reproduce --set train.steps=20` records: the page said they were out of date and `reproduce` would train
    them again, while `reproduce` with the same --set reused them; the page now names the overrides they ran with"""
    import dataclasses
    from pathlib import Path

    from energyformer.studies.runner import _config, config_hash
    from energyformer.studies.plan import expand

    spec, root, data = study
    page = tmp_path / "page"
    shutil.copytree(root / "out", page / "cpu")
    monkeypatch.setattr("energyformer.studies.command.load_study", lambda name: spec)
    edited = json.loads((page / "cpu" / "results.json").read_text())
    plan = next(p for p in expand(spec, "cpu", seeds=[0]) if p.name == "L8_s0_eqt")
    ran = dataclasses.replace(plan, overrides=[*plan.overrides[:-2], "train.lr=5e-4", *plan.overrides[-2:]])
    edited["runs"]["L8_s0_eqt"].update(overrides=ran.overrides, config_hash=config_hash(_config(ran, Path("runs"))))
    (page / "cpu" / "results.json").write_text(json.dumps(edited))
    assert study_main("tiny", ["--report-only", "--out", str(page)]) == 0
    text = (page / "cpu" / "README.md").read_text()
    assert "Out of date" not in text
    assert ("**Made with command-line overrides:** 1 of these records ran with `--set` beyond the study's "
            "configuration (`L8_s0_eqt`): `--set train.lr=5e-4`.") in text


def test_a_diverged_run_is_recorded_and_probes_are_made_once(tmp_path, monkeypatch):
    from energyformer.studies.runner import run_probes, train_one
    from energyformer.studies.plan import expand
    from energyformer.train import TrainingDiverged

    spec = load_study(write(tmp_path / "t.yaml", probes={"host": "builtins:str", "nothing": "builtins:print"}))
    plan = expand(spec, "cpu")[0]

    def diverge(*a, **k):
        raise TrainingDiverged(2, float("nan"))

    monkeypatch.setattr(experiment, "run_experiment", diverge)
    rec = train_one(plan, str(tmp_path / "runs"), spec.metrics, "cpu")
    assert rec["diverged"].startswith("training diverged at step 2") and rec["metrics"] == {} and rec["steps"] == 2
    assert rec["cell"] == plan.cell and rec["config_hash"] != "migrated"
    logs: list[str] = []
    out = run_probes(spec, "cpu", tmp_path / "r.json", {"format": 1, "runs": {}}, logs.append)
    assert out["probes"] == {"host": "cpu"}            # a probe returning None is not recorded
    assert json.loads((tmp_path / "r.json").read_text())["probes"] == {"host": "cpu"}
    run_probes(spec, "cpu", tmp_path / "r.json", out, logs.append)
    assert "== probe host: reusing its record" in logs


def test_migration_notes_are_dropped_once_no_record_is_migrated(tmp_path):
    from energyformer.studies.runner import load_results, save_results

    path = tmp_path / "results.json"
    data = {"format": 1, "runs": {"a": {"config_hash": "migrated", "seed": 0}, "b": {"config_hash": "x", "seed": 0}},
            "setup": {"k": "v"}, "note": "trained by the old program"}
    data["format"] = load_results(tmp_path / "none.json", "s", "cpu")["format"]
    save_results(path, data)
    assert load_results(path, "s", "cpu")["note"] == "trained by the old program"
    data["runs"]["a"]["config_hash"] = "y"   # the migrated run was retrained
    save_results(path, data)
    kept = load_results(path, "s", "cpu")
    assert "note" not in kept and "setup" not in kept and set(kept["runs"]) == {"a", "b"}


@pytest.mark.parametrize("content, message", [
    # another study's or scale's records: their page was rewritten as this study's (report-only) or runs added
    ({"study": "cem-gp", "scale": "cpu", "runs": {}}, "the records of study 'cem-gp', not 's'"),
    ({"study": "s", "scale": "gpu", "runs": {}}, "the records of scale 'gpu', not 'cpu'"),
    # malformed records were an internal error (AttributeError)
    ({"study": "s", "scale": "cpu", "runs": []}, "'runs' is not a mapping of run records"),
    ({"study": "s", "scale": "cpu", "runs": {"x": 5}}, "runs['x'] is not a record"),
    ({"study": "s", "scale": "cpu", "format": 2, "runs": {}}, "not a study record file (format 2, want 1)"),
    ({"runs": {"x": {"seed": 0, "metrics": {"val": [1.0, {"ok": True}]}}}},
     "runs['x'].metrics.val.1.ok is a true/false, not a metric value"),
    # impossible values were rendered as they are (accuracy 150 %, negative times) or an internal error (seed)
    ({"runs": {"x": {"seed": "zero"}}}, "runs['x'].seed = 'zero': must be an integer >= 0"),
    ({"runs": {"x": {"cell": {}}}}, "runs['x'].seed = None: must be an integer >= 0"),
    ({"runs": {"x": {"seed": True}}}, "runs['x'].seed = True: must be an integer >= 0"),
    ({"runs": {"x": {"seed": 0, "cell": ["a"]}}}, "runs['x'].cell = ['a']: must be a mapping of axis to label"),
    ({"runs": {"x": {"seed": 0, "steps": -3}}}, "runs['x'].steps = -3: must be a number >= 0"),
    ({"runs": {"x": {"seed": 0, "seconds": "1s"}}}, "runs['x'].seconds = '1s': must be a number >= 0"),
    ({"runs": {"x": {"seed": 0, "metrics": {"accuracy": {"plain": 150.0}}}}},
     "runs['x'].metrics.accuracy.plain = 150.0: an accuracy is within [0, 100]"),
    ({"runs": {"x": {"seed": 0, "metrics": {"val": {"cell_accuracy@16": -0.5}}}}},
     "runs['x'].metrics.val.cell_accuracy@16 = -0.5: an accuracy is within [0, 100]"),
    ({"runs": {"x": {"seed": 0, "metrics": {"valid_fraction": 1.25}}}},
     "runs['x'].metrics.valid_fraction = 1.25: a fraction is within [0, 1]"),
])
def test_a_record_file_of_another_study_or_malformed_is_refused_naming_it(tmp_path, content, message):
    import json

    from energyformer.studies.runner import load_results
    from energyformer.utils.validate import ConfigError

    path = tmp_path / "results.json"
    fmt = load_results(tmp_path / "none.json", "s", "cpu")["format"]
    path.write_text(json.dumps({"format": fmt, **content}))   # (content's own format wins)
    with pytest.raises(ConfigError) as err:
        load_results(path, "s", "cpu")
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_possible_values_are_read():
    """The range rule's edges and what it leaves alone: an accuracy in % up to 100, a fraction up to 1, a standard
    error, a curve's steps beside its accuracies (list elements), null metrics."""
    from energyformer.studies.records import _bad_field

    ok = {"seed": 0, "cell": {"n": 4}, "steps": 0, "seconds": 0.5, "tokens_per_s": None,
          "metrics": {"accuracy": {"plain": 100.0, "bad": None}, "board_accuracy": 0.0, "valid_fraction": 1.0,
                      "accuracy_se": 400.0, "accuracy_curve": [[1000, 0.5]], "loss": -3.0}}
    assert _bad_field(ok, "r") is None


def test_a_runs_hardware_names_the_card_of_its_device(monkeypatch):
    """``train.device=cuda:1`` recorded the current card's name (device 0's), not card 1's (an outside review)."""
    import torch

    from energyformer.studies.runner import hardware

    names = {0: "Card Zero", 1: "Card One"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: names[
        0 if d is None or getattr(d, "index", d) is None else getattr(d, "index", d)])
    assert hardware("cuda:1").startswith("Card One GPU") and hardware("cuda").startswith("Card Zero GPU")
    assert "CPU" in hardware("cpu")
