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
