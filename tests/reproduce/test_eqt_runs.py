"""`energyformer reproduce eqt` runs through the Trainer: shared initial backbone, reuse, resume."""

import json

import pytest
import torch

from energyformer.experiment import build_model, build_task, resolve
from energyformer.reproduce import eqt
from energyformer.tasks.parity import ParityTask

TINY = ["--lengths", "8", "--seeds", "0", "--train-steps", "4", "--n-test", "8", "--timing-repeats", "1"]


def _args(tmp_path, *extra):
    return eqt.parse_args([*TINY, "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), *extra])


def test_baseline_and_eqt_start_from_the_same_backbone(tmp_path):
    args = _args(tmp_path)
    sd = {}
    for name in eqt.MODELS:
        cfg = eqt.run_config(args, 8, 3, name)
        task = build_task(cfg)
        sd[name] = build_model(resolve(cfg, task), task).state_dict()
    # EqT wraps its last layer (layers.<i>.layer.*) beside the refiner; every baseline tensor is there
    eq = {k.replace(".layer.", "."): v for k, v in sd["eqt"].items()}
    assert sd["baseline"].keys() <= eq.keys()
    for k, v in sd["baseline"].items():
        assert torch.equal(v, eq[k]), k


def test_second_invocation_reuses_finished_runs(tmp_path, monkeypatch, capsys):
    argv = [*TINY, "--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
    assert eqt.main(argv) == 0
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["L8_seed0_baseline", "L8_seed0_eqt"]
    ckpts = sorted(str(p) for p in runs.glob("*/ckpt-*"))
    assert len(ckpts) == 2 and all((p / "model.safetensors").exists() for p in map(type(runs), ckpts))
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    (run,) = res["runs"]
    assert len(run["curves"]["eqt"]) == 4 and len(run["timing"]["infer_ratio_k8"]) == 1
    calls = []
    monkeypatch.setattr(eqt, "run_experiment", lambda *a, **k: calls.append(a) or pytest.fail("retrained"))
    capsys.readouterr()
    assert eqt.main(argv) == 0
    assert "reusing" in capsys.readouterr().out and not calls
    assert sorted(str(p) for p in runs.glob("*/ckpt-*")) == ckpts
    assert json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]["accuracy"] == run["accuracy"]


class _Crash(RuntimeError):
    pass


class _CrashAt:
    """Fails the run after optimiser step ``at`` (as a killed process would stop it)."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, trainer, step):
        if step == self.at:
            raise _Crash(f"crash at step {step}")


def test_interrupted_run_resumes_and_matches_an_uninterrupted_one(tmp_path, monkeypatch):
    args = _args(tmp_path, "--train-steps", "6", "--save-every", "2")
    run_dir = tmp_path / "runs" / "L8_seed0_baseline"
    with monkeypatch.context() as m:
        m.setattr(ParityTask, "callbacks", lambda self, model: [_CrashAt(3)])
        with pytest.raises(_Crash):
            eqt.train_run(args, 8, 0, "baseline")
    assert (run_dir / "ckpt-00000002").is_dir() and not (run_dir / "result.json").exists()
    row = eqt.train_run(args, 8, 0, "baseline")          # resumes from step 2
    info = json.loads((run_dir / "run_info.json").read_text())
    assert [r["step"] for r in info["resumes"]] == [2]
    ref = eqt.train_run(_args(tmp_path / "ref", "--train-steps", "6", "--save-every", "2"), 8, 0, "baseline")
    assert len(row["curve"]) == 6
    assert row["curve"] == pytest.approx(ref["curve"], rel=1e-4)
    assert row["accuracy"] == ref["accuracy"]
    # the same config again: reused; a changed one (another --lr) trains from scratch
    assert eqt.train_run(args, 8, 0, "baseline") == row
    new = eqt.train_run(_args(tmp_path, "--train-steps", "6", "--save-every", "2", "--lr", "1e-3"), 8, 0, "baseline")
    assert new["config"]["train"]["lr"] == 1e-3 and "resumes" not in json.loads((run_dir / "run_info.json").read_text())


def test_per_length_gain_names_each_length_and_the_lengths_at_chance():
    def row(b, e):
        return {"baseline": {"mean": b}, "eqt_k32": {"mean": e}}
    table = {64: row(55.0, 60.0), 192: row(50.2, 49.9), 128: row(50.1, 51.6)}
    text = eqt.per_length_gain(table, [64, 128, 192])
    assert "L=64 +5.00 (paper +4.66)" in text and "L=192 -0.30 (paper +8.07)" in text
    assert "at L ∈ [192] both models are at chance" in text  # 128: EqT is 1.6 points above 50%
    assert "at chance" not in eqt.per_length_gain(table, [64])
