"""SIGKILL a training subprocess after its first checkpoint, resume in a new process: same losses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from energyformer.train import list_checkpoints, verify_checkpoint

SCRIPT = "from train_toys import main\nmain()\n"
STEPS, SAVE_EVERY = 40, 10


def _final(stdout: str) -> dict:
    lines = [x for x in stdout.splitlines() if x.startswith("FINAL ")]
    assert lines, f"no FINAL line in output:\n{stdout}"
    return json.loads(lines[-1][len("FINAL "):])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, subprocess_env):
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"

    def launch(out, resume, sleep):
        return subprocess.Popen(
            [sys.executable, str(script), str(out), str(STEPS), str(SAVE_EVERY), resume, str(sleep)],
            env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    reference = launch(ref_dir, "0", 0.0)  # uninterrupted, runs alongside
    victim = launch(run_dir, "0", 0.05)  # slowed down so there is time to kill it
    deadline = time.time() + 90
    while not (run_dir / "latest").exists():
        assert victim.poll() is None, f"training script exited early:\n{victim.communicate()[1]}"
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    assert victim.poll() is None, "run finished before it could be killed"
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL

    ckpts = list_checkpoints(run_dir)
    assert ckpts and max(int(p.name.split("-")[1]) for p in ckpts) < STEPS
    for p in ckpts:
        verify_checkpoint(p)

    resumed = launch(run_dir, "1", 0.0)
    out, err = resumed.communicate(timeout=90)
    assert resumed.returncode == 0, err
    ref_out, ref_err = reference.communicate(timeout=90)
    assert reference.returncode == 0, ref_err

    ref, res = _final(ref_out), _final(out)
    start = json.loads((run_dir / "run_info.json").read_text())["resumes"][0]["step"]
    assert start % SAVE_EVERY == 0 and 0 < start < STEPS
    assert res["step"] == ref["step"] == STEPS
    assert res["losses"] == ref["losses"][start:]  # every step after resume, bit for bit
    assert res["loss"] == ref["loss"]
    # the run's metrics.jsonl tells one consistent story: each step once, same losses
    events = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == list(range(1, STEPS + 1))
    assert [e["loss"] for e in train] == ref["losses"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_names_the_step_and_the_last_checkpoint(tmp_path, subprocess_env):
    """SIGTERM still ends the run at once (killed by the signal, nothing saved), but no longer silently:
    one line names the step reached and the last checkpoint, which --resume continues from."""
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    victim = subprocess.Popen([sys.executable, str(script), str(run_dir), str(STEPS), str(SAVE_EVERY), "0", "0.05"],
                              env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while not (run_dir / "latest").exists():
        assert victim.poll() is None, f"training script exited early:\n{victim.communicate()[1]}"
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    time.sleep(0.1)
    assert victim.poll() is None, "run finished before it could be terminated"
    victim.send_signal(signal.SIGTERM)
    _, err = victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGTERM, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    last = run_dir / (run_dir / "latest").read_text().strip()
    assert lines[0].startswith("energyformer: terminated (SIGTERM) at step "), err
    step = int(lines[0].split(" at step ")[1].split(";")[0])
    assert f"the last checkpoint is {last} (step {int(last.name[5:])}); --resume continues from it" in lines[0]
    assert int(last.name[5:]) <= step < STEPS
    resumed = subprocess.run([sys.executable, str(script), str(run_dir), str(STEPS), str(SAVE_EVERY), "1", "0"],
                             env=subprocess_env, capture_output=True, text=True, timeout=90)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "run_info.json").read_text())["resumes"][0]["checkpoint"] == str(last)
    assert not list(run_dir.glob("*.tmp"))  # a save cut short by the signal: its folder is gone
