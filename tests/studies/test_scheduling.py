"""SIGTERM to a study run stops every run at a step boundary with its checkpoint saved, names the stopped runs and
the command that continues them, exits 143 and leaves no process behind (a subprocess trains the tiny study with
steps enough never to finish).

Before: with ``--jobs 2`` the parent died at once and its spawned workers trained on, re-parented to PID 1 and holding
their run directories' locks (every rerun failed with RunDirBusy); a worker whose parent was killed trained on too;
with ``--jobs 1`` SIGTERM saved nothing (it printed the trainer's note and ended)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from energyformer.studies.plan import RunPlan
from energyformer.studies.scheduling import SeeTrainer, train_serial
from energyformer.train.lock import RunDirBusy, RunDirLock, lock_holder

from .tiny import write


RUNS = ("L8_s0_baseline", "L8_s0_eqt")
SCRIPT = """import sys
from pathlib import Path
from energyformer.studies import load_study
from energyformer.studies.runner import run_study
root = Path(sys.argv[1])
run_study(load_study(root / "tiny.yaml"), "tiny", "cpu", root / "out", root / "runs", jobs=int(sys.argv[2]),
          sets=["train.steps=1000000", "train.save_every=0"])
"""


def _start(tmp_path: Path, jobs: int, runs=RUNS) -> subprocess.Popen:
    """The tiny study in a subprocess, returned once every run of ``runs`` has logged a training step."""
    write(tmp_path / "tiny.yaml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), str(jobs)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 60
    while not all('"train"' in _read(tmp_path / "runs" / r / "metrics.jsonl") for r in runs):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the study did not start training: {proc.communicate()[0]}")
        time.sleep(0.2)
    return proc


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _holders(tmp_path: Path) -> list[int]:
    """pids of live processes holding a run directory's lock"""
    live = []
    for r in RUNS:
        try:
            RunDirLock(tmp_path / "runs" / r).acquire().release()
        except RunDirBusy:
            live.append(int(lock_holder(tmp_path / "runs" / r)["pid"]))
    return live


def _kill_leftovers(tmp_path: Path) -> None:
    for pid in _holders(tmp_path):   # (the old code left the workers training)
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("jobs", [2, 1])
def test_sigterm_saves_every_run_names_them_and_leaves_no_process(tmp_path, jobs):
    proc = _start(tmp_path, jobs, RUNS if jobs > 1 else RUNS[:1])
    try:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=40)[0]
        assert _holders(tmp_path) == [], f"a process still holds a run directory: {out}"
        assert proc.returncode == 143, out
        stopped = RUNS if jobs > 1 else RUNS[:1]
        for r in stopped:
            assert f"== {r}: stopped; its checkpoint" in out, out
            assert list((tmp_path / "runs" / r).glob("ckpt-*")), f"{r}: no checkpoint saved"
        assert f"{len(stopped)} run(s) stopped" in out and "run the same command again" in out, out
    finally:
        proc.kill()
        _kill_leftovers(tmp_path)


def test_a_worker_whose_parent_was_killed_saves_and_exits(tmp_path):
    proc = _start(tmp_path, 2)
    try:
        proc.kill()   # SIGKILL: the parent forwards nothing
        proc.communicate(timeout=10)
        deadline = time.monotonic() + 20
        while _holders(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _holders(tmp_path) == [], "a worker trains on without its parent"
        for r in RUNS:
            assert list((tmp_path / "runs" / r).glob("ckpt-*")), f"{r}: no checkpoint saved"
    finally:
        _kill_leftovers(tmp_path)


def test_ctrl_c_in_the_second_of_three_runs_records_the_first_and_names_the_rest(tmp_path):
    """train_serial's stop without a subprocess (Ctrl-C between runs): the finished run is recorded, the stopped one
    named, the later one counted as not started, then KeyboardInterrupt (the CLI's "interrupted", exit 130)."""
    todo = [RunPlan(n, {}, 0, "c") for n in ("a", "b", "c")]
    trained, recorded, log = [], [], []

    def train(plan, *args, out):
        trained.append(plan.name)
        if plan.name == "b":
            raise KeyboardInterrupt
        return {"name": plan.name}

    stop = ("s", {p.name: 5 for p in todo}, {p.name: tmp_path / p.name for p in todo}, log.append)
    with pytest.raises(KeyboardInterrupt):
        train_serial(train, todo, {p.name: 0 for p in todo}, (), str(tmp_path), stop,
                     lambda p, rec: recorded.append(rec["name"]))
    assert trained == ["a", "b"] and recorded == ["a"]
    assert "== b: stopped; no checkpoint was written yet" in log, log
    assert not any(line.startswith(("== a: stopped", "== c: stopped")) for line in log), log
    assert any(line.startswith("== stopped by SIGINT: 1 run(s) stopped, 1 not started. To continue, run the same "
                               "command again (energyformer reproduce s with the same options)") for line in log), log


# train_serial without a subprocess (its docstring and the module's): of two failed runs the first one's error is
# raised after the others are recorded; SIGTERM stops the study with exit status 143 (128 + SIGTERM); a signal that
# comes while the trainer applies a step is deferred until the step is applied.


def _serial(tmp_path, train, recorded, log):
    todo = [RunPlan(n, {}, 0, "c") for n in ("a", "b", "c")]
    stop = ("s", {p.name: 5 for p in todo}, {p.name: tmp_path / p.name for p in todo}, log.append)
    try:
        train_serial(train, todo, {p.name: 0 for p in todo}, (), str(tmp_path), stop,
                     lambda p, rec: recorded.append(rec["name"]))
    finally:
        SeeTrainer.trainer = None


def test_of_two_failed_runs_the_first_ones_error_is_raised_after_the_rest_are_recorded(tmp_path):
    def train(plan, *args, out):
        if plan.name != "b":
            raise ValueError(f"run {plan.name} broke")
        return {"name": plan.name}

    recorded, log = [], []
    with pytest.raises(ValueError, match="run a broke"):
        _serial(tmp_path, train, recorded, log)
    assert recorded == ["b"] and "== 2 run(s) failed: a, c" in log


def test_sigterm_stops_the_study_with_exit_status_143(tmp_path):
    def train(plan, *args, out):
        if plan.name == "b":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        return {"name": plan.name}

    with pytest.raises(SystemExit) as e:
        _serial(tmp_path, train, [], [])
    assert e.value.code == 128 + signal.SIGTERM


def test_a_signal_while_a_step_is_applied_waits_for_the_step(tmp_path, monkeypatch):
    monkeypatch.setattr(SeeTrainer, "trainer", None)  # the fake trainer set below is not left to later tests
    # a background job (`cmd &` in a shell without job control, as CI may start pytest) inherits SIGINT ignored, which
    # the scheduler rightly keeps: give this process Python's own Ctrl-C for the test, and restore the old disposition
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []

    def train(plan, *args, out):
        if plan.name == "b":
            SeeTrainer.trainer = SimpleNamespace(applying_step=True)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("step applied")   # the update finished before the stop
            SeeTrainer.trainer.applying_step = False
            time.sleep(1)
            done.append("not reached")
        return {"name": plan.name}

    try:
        with pytest.raises(KeyboardInterrupt):
            _serial(tmp_path, train, [], [])
    finally:
        signal.signal(signal.SIGINT, old)
    assert done == ["step applied"]
