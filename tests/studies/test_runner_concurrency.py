"""Two ``reproduce`` processes writing one page folder (``--out``) keep each other's records.

Before: ``run_study`` read ``results.json`` once at its start and rewrote the whole file from that snapshot after each
run, so the last writer dropped every record the other process had added meanwhile (both exited 0; probe W, 1)."""

import copy
import json
import subprocess
import sys

import energyformer.studies.runner as runner
from energyformer.studies import load_study
from energyformer.studies.runner import run_study

from .tiny import TINY, write


def _fake_record(plan):
    return {"cell": plan.cell, "seed": plan.seed, "config_hash": "x", "scale": "cpu", "device": "cpu",
            "steps": 3, "seconds": 0.0, "metrics": {}}


def test_two_runners_interleaved_on_one_page_folder_keep_both_records(tmp_path, monkeypatch):
    """While runner A trains its run, runner B (another --only, same --out) records its own; A's record then joins
    B's instead of replacing the file with A's start-time snapshot (which lost L8_s0_eqt)."""
    spec = load_study(write(tmp_path / "tiny.yaml"))
    out, runs = tmp_path / "out", tmp_path / "runs"
    calls = []

    def train(plan, *args, **kwargs):
        calls.append(plan.name)
        if len(calls) == 1:   # A is training: B runs to its end meanwhile
            run_study(spec, "tiny", "cpu", out, runs, only={"model": ["eqt"]}, log=lambda s: None)
        return _fake_record(plan)

    monkeypatch.setattr(runner, "train_one", train)
    data = run_study(spec, "tiny", "cpu", out, runs, only={"model": ["baseline"]}, log=lambda s: None)
    on_disk = json.loads((out / "results.json").read_text())["runs"]
    assert sorted(on_disk) == ["L8_s0_baseline", "L8_s0_eqt"], on_disk
    assert sorted(data["runs"]) == sorted(on_disk)   # A's returned records include B's too


SCRIPT = """import sys
from pathlib import Path
from energyformer.studies.runner import load_results, update_results
path, tag = Path(sys.argv[1]), sys.argv[2]
data = load_results(path, "s", "cpu")
for i in range(25):
    update_results(path, data, lambda d: d["runs"].__setitem__(f"{tag}{i}", {"seed": i}))
"""


def test_two_processes_inserting_records_at_once_lose_none(tmp_path):
    """Two processes each insert 25 records into one results.json at the same time: all 50 are there."""
    path = tmp_path / "out" / "results.json"
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(path), tag]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    runs = json.loads(path.read_text())["runs"]
    assert sorted(runs) == sorted(f"{t}{i}" for t in "ab" for i in range(25))
    assert not [p.name for p in path.parent.iterdir() if p.name != "results.json"]   # no lock file left behind


def test_a_failing_run_with_jobs_1_leaves_the_others_recorded_and_is_named(tmp_path, monkeypatch):
    """--jobs 1 as --jobs 2: the failed run is named ("1 run(s) failed: ..."), the later runs still train and are
    recorded, then its error ends the command. Before: the first failure ended the study (L8_s0_eqt never started)
    and the final line did not name the run."""
    spec = load_study(write(tmp_path / "tiny.yaml"))

    def train(plan, *args, **kwargs):
        if plan.cell["model"] == "baseline":
            raise RuntimeError("hook broke")
        return _fake_record(plan)

    monkeypatch.setattr(runner, "train_one", train)
    log = []
    try:
        run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", log=log.append)
    except RuntimeError as err:
        assert str(err) == "hook broke"
    else:
        raise AssertionError("the failure was not raised")
    assert sorted(json.loads((tmp_path / "out" / "results.json").read_text())["runs"]) == ["L8_s0_eqt"]
    assert "== L8_s0_baseline: FAILED (RuntimeError: hook broke)" in log
    assert "== 1 run(s) failed: L8_s0_baseline" in log, log


def test_a_record_made_without_a_metric_the_study_now_declares_is_evaluated_again(tmp_path):
    """A metric added to the study after a run was recorded: its checkpoint is evaluated again (not retrained) and
    the record gains the metric; before, the record was reused forever (config unchanged) and a claim on the new
    metric stayed UNTESTABLE "no selected run has the metric". The page names such records out of date."""
    from energyformer.studies.runner import outdated_text

    data = copy.deepcopy(TINY)
    data["metrics"] = {"accuracy": TINY["metrics"]["accuracy"]}
    spec = load_study(write(tmp_path / "tiny.yaml", **data))
    out, runs = tmp_path / "out", tmp_path / "runs"
    first = run_study(spec, "tiny", "cpu", out, runs, only={"model": ["baseline"]}, log=lambda s: None)
    rec = first["runs"]["L8_s0_baseline"]
    assert rec["metric_hooks"] == spec.metrics and "train_ce" not in rec["metrics"] and rec["version"]
    wider = load_study(write(tmp_path / "tiny.yaml", **{**data, "metrics": TINY["metrics"]}))
    assert "evaluated with other metric hooks" in outdated_text(wider, "cpu", first["runs"])
    log = []
    again = run_study(wider, "tiny", "cpu", out, runs, only={"model": ["baseline"]}, log=log.append)
    assert any("its record was made without the metric(s) convergence, train_ce: evaluating it again" in line
               for line in log), log
    new = again["runs"]["L8_s0_baseline"]
    assert new["resumed"] and len(new["metrics"]["train_ce"]) == 3 and new["metric_hooks"] == wider.metrics
    assert "metric hooks" not in outdated_text(wider, "cpu", again["runs"])
