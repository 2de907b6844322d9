"""What run_study records and says of its runs: a diverged run is a result of the study, recorded in results.json
(committed with the page), its ``diverged`` field the one sentence that says what diverged and where, not the
remedies nor the local checkpoint path the exception goes on to give; the progress line counts the runs it trains,
not the runs it reuses."""

import json
from pathlib import Path

import energyformer.experiment as experiment
import energyformer.studies.runner as runner
from energyformer.studies import load_study
from energyformer.studies.plan import expand
from energyformer.studies.runner import train_one
from energyformer.train import TrainingDiverged

from .tiny import write


def test_a_diverged_record_says_what_diverged_without_the_advice_or_a_local_path(tmp_path, monkeypatch):
    spec = load_study(write(tmp_path / "t.yaml"))
    plan = expand(spec, "cpu")[0]

    def diverge(*a, **k):
        raise TrainingDiverged(2, float("nan"), last_checkpoint=str(tmp_path / "runs" / "x" / "ckpt-1"))

    monkeypatch.setattr(experiment, "run_experiment", diverge)
    rec = train_one(plan, str(tmp_path / "runs"), spec.metrics, "cpu")
    assert rec["diverged"] == "training diverged at step 2: loss = nan is not finite"
    assert rec["steps"] == 2 and rec["metrics"] == {}


# run_study's progress line counts the runs it trains, not the runs it reuses: with one of two runs recorded, the
# other's line ends "1/1 done" (training is replaced by a record here).


def test_the_done_count_is_of_the_runs_trained_now(tmp_path, monkeypatch):
    spec = load_study(write(tmp_path / "tiny.yaml"))

    def train_one(plan, runs_dir, metrics, scale, threads=0, out=None):
        cfg = runner._config(plan, Path(runs_dir))
        return {"cell": plan.cell, "seed": plan.seed, "config": plan.config, "overrides": plan.overrides,
                "config_hash": runner.config_hash(cfg), "scale": scale, "device": "cpu", "metric_hooks": dict(metrics),
                "steps": 3, "seconds": 1.0, "metrics": {}}

    monkeypatch.setattr(runner, "train_one", train_one)
    runner.run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", log=lambda s: None)
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    del data["runs"]["L8_s0_eqt"]
    (tmp_path / "out" / "results.json").write_text(json.dumps(data))
    log = []
    runner.run_study(spec, "tiny", "cpu", tmp_path / "out", tmp_path / "runs", log=log.append)
    assert "== L8_s0_baseline: reusing its record (config unchanged)" in log
    assert "== L8_s0_eqt: 3 steps in 1s (cpu); 1/1 done" in log, log
