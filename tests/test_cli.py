"""End-to-end CLI: help, train -> eval -> generate, clear errors, and SIGKILL + --resume exactness."""

import json
import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from energyformer.cli import build_parser, main

TINY = ["model.dim=32", "model.n_layers=2", "model.heads=2", "model.max_seq_len=32", "task.seq_len=32",
        "task.batch_size=4", "task.eval_batch_size=4", "task.eval_max_batches=2", "train.progress=false",
        "train.tensorboard=false", "train.log_every=1"]


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


@pytest.mark.parametrize("cmd", [[], ["train"], ["eval"], ["generate"], ["list"], ["demo"], ["reproduce"], ["config"]])
def test_help_is_useful(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(cmd + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: energyformer" in out and len(out) > 200


def test_version_names_the_package_torch_and_the_commit(capsys):
    import torch

    import energyformer
    from energyformer.train.runinfo import git_info

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"energyformer {energyformer.__version__} (torch {torch.__version__}"), out
    commit = git_info(Path(energyformer.__file__).parent)["commit"]
    assert commit is None or f"commit {commit[:12]}" in out


def test_python_dash_m_energyformer_is_the_command():
    out = subprocess.run([sys.executable, "-m", "energyformer", "--version"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("energyformer "), out.stderr[-1000:]


def test_task_options_are_read_only_for_the_help_that_lists_them(monkeypatch, capsys):
    """``eval --help`` / ``generate --help`` list each task's own options (``lm``'s --text-file, --prompt); building
    the parser and parsing any command reads no task (importing every task took seconds: ``energyformer --help``
    5.9 s, now 0.3 s)."""
    from energyformer import cli

    real, calls = cli._tasks, []
    monkeypatch.setattr(cli, "_tasks", lambda: calls.append(1) or real())
    parser = build_parser()
    parser.parse_args(["report", "--check"])
    parser.parse_args(["eval", "runs/x", "--split", "test"])
    assert calls == []
    for cmd, option in (("eval", "--text-file FILE"), ("generate", "--max-new-tokens MAX_NEW_TOKENS")):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--help"])
        out = capsys.readouterr().out
        assert "options of the run's task:" in out and "task lm:" in out and option in out, out
    assert len(calls) == 2


def test_train_eval_generate_roundtrip(tmp_path, capsys):
    ov = TINY + ["train.steps=4", "train.eval_every=2", "train.save_every=2", "name=tiny", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", *_sets(ov)]) == 0
    # without a progress bar the trainer's step lines are the progress (no handler printed them: nothing until
    # the summary), and only during the run
    out = capsys.readouterr().out
    assert "step 1/4 loss" in out and "step 4/4 loss" in out and "step 4: saved" in out, out
    import logging

    assert not logging.getLogger("energyformer.train").handlers
    run = tmp_path / "tiny"
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").exists()
    text = tmp_path / "any.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20, encoding="utf-8")
    capsys.readouterr()
    assert main(["eval", str(run), "--text-file", str(text)]) == 0
    out = capsys.readouterr().out
    assert "perplexity" in out and "bits/byte" in out
    assert main(["generate", str(run), "--prompt", "ROMEO:", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_bad_input_gives_one_line_error(capsys):
    assert main(["config", "lm/cem_full", "--set", "model.block.attention.stpes=2"]) == 2
    err = capsys.readouterr().err
    assert "model.block.attention.stpes" in err and "did you mean 'model.block.attention.steps'" in err
    assert main(["config", "lm/llama", "--set", "model.block.mlp=gated"]) == 2
    err = capsys.readouterr().err
    assert "unknown mlp kind 'gated'" in err and "swiglu" in err
    assert main(["config", "lm/llama", "--set", "task.kind=sudokuu"]) == 2
    err = capsys.readouterr().err
    assert "unknown task kind 'sudokuu'" in err and "registered: " in err and "did you mean 'sudoku'" in err
    assert main(["train", "no/such/config"]) == 2   # no name near it: where the names are, not all of them
    assert "`energyformer list configs` lists all" in capsys.readouterr().err


def _losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec and rec.get("step") is not None and rec.get("event", "train") == "train":
            out[int(rec["step"])] = rec["loss"]
    return out


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    """~2k training tokens (16 steps x 4 x 32), killed mid-run with SIGKILL, resumed with --resume."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    base = TINY + ["train.steps=16", "train.eval_every=100", "train.save_every=4", "train.device=cpu"]
    cli = [sys.executable, "-c", "import sys, torch; torch.set_num_threads(1); from energyformer.cli import main; "
           "sys.exit(main(sys.argv[1:]))"]

    def train(name, extra=()):
        return [*cli, "train", "lm/llama", *_sets(base + [f"name={name}", f"out_dir={tmp_path}"]), *extra]

    subprocess.run(train("ref"), env=env, check=True, capture_output=True)
    proc = subprocess.Popen(train("killed"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "killed"
    deadline = time.time() + 120
    while time.time() < deadline and not list(run.glob("ckpt-*[0-9]")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(run.glob("ckpt-*[0-9]")), "no checkpoint appeared before the kill"
    subprocess.run(train("killed", ["--resume"]), env=env, check=True, capture_output=True)
    ref, got = _losses(tmp_path / "ref"), _losses(run)
    assert max(ref) == max(got) == 16
    for step in range(1, 17):
        assert got[step] == ref[step], (step, got[step], ref[step])


@pytest.mark.slow
def test_torchrun_two_process_ddp_lm_training(tmp_path):
    """`torchrun --nproc_per_node=2 -m energyformer.cli train ...` with gloo on CPU."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ov = TINY + ["train.steps=3", "train.eval_every=3", "train.save_every=3", "train.device=cpu",
                 "name=ddp", f"out_dir={tmp_path}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "energyformer.cli", "train", "lm/llama", *_sets(ov)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "ddp"
    assert max(_losses(run)) == 3 and list(run.glob("ckpt-*[0-9]"))
    info = json.loads((run / "run_info.json").read_text())
    assert info["world_size"] == 2


def test_new_run_on_top_of_old_checkpoints_is_a_clear_error(tmp_path, capsys):
    ov = TINY + ["train.steps=2", "train.eval_every=2", "train.save_every=2", "name=twice", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", *_sets(ov)]) == 0
    capsys.readouterr()
    assert main(["train", "lm/llama", *_sets(ov)]) == 2
    err = capsys.readouterr().err
    assert "already holds checkpoints" in err and "--resume" in err
    assert main(["train", "lm/llama", "--resume", *_sets(ov)]) == 0


def test_eval_refuses_options_the_run_cannot_honour(tmp_path, capsys):
    """Issue 25 class 2: `eval --steps` on a Llama and `--split/--iterations` on a GP run were
    silently ignored (rc 0, numbers identical to a plain eval)."""
    ov = TINY + ["train.steps=1", "train.eval_every=0", "name=l", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", *_sets(ov)]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "l"), "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "--steps 3" in err and "'transformer'" in err and err.count("\n") == 1
    cfg = tmp_path / "gp.yaml"
    cfg.write_text(f"name: g\nout_dir: {tmp_path}\ntask: {{kind: gp, n_train: 32, n_test: 8, batch_size: 32}}\n"
                   "model: {dim: 16}\ntrain: {steps: 1, progress: false, tensorboard: false}\n")
    assert main(["train", str(cfg)]) == 0
    capsys.readouterr()
    for args, what in ((["--split", "test"], "--split test"), (["--iterations", "2"], "--iterations 2")):
        assert main(["eval", str(tmp_path / "g"), *args]) == 2
        err = capsys.readouterr().err
        assert what in err and err.count("\n") == 1, err
    assert main(["eval", str(tmp_path / "g")]) == 0
    assert main(["eval", str(tmp_path / "g"), "--steps", "2"]) == 0   # its CEM block's T (tests/tasks/test_gp.py)


def test_resume_and_eval_refuse_a_config_that_no_longer_fits_the_checkpoint(tmp_path, capsys):
    """Issue 25 class 4: an edited run-dir config.yaml used to be ignored by --resume, and the
    resumed run could then not be evaluated; a changed model on resume is refused too."""
    import yaml

    ov = TINY + ["train.steps=2", "train.save_every=1", "train.eval_every=0", "name=r", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", *_sets(ov)]) == 0
    capsys.readouterr()
    # another model on --resume
    assert main(["train", "lm/llama", *_sets(ov + ["train.steps=3", "model.dim=64"]), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "model.dim: 32 -> 64" in err and err.count("\n") == 1, err
    # a train-config change is still allowed on resume
    assert main(["train", "lm/llama", *_sets(ov + ["train.steps=3"]), "--resume"]) == 0
    capsys.readouterr()
    # an edited config.yaml
    path = tmp_path / "r" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["model"]["n_layers"] = 3
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for cmd in (["train", "lm/llama", *_sets(ov + ["train.steps=4"]), "--resume"], ["eval", str(tmp_path / "r")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert "edited after the checkpoint was written?" in err and "model.n_layers: 2 -> 3" in err, err
    # a checkpoint copied in from another run: named as such, the switched attention kind first (not its sub-keys)
    path.write_text(yaml.safe_dump({**cfg, "model": {**cfg["model"], "n_layers": 2}}, sort_keys=False))
    # (at the step its name says: a folder renamed to another step is a damaged checkpoint, passed over)
    assert main(["train", "lm/cem_full", *_sets(TINY + ["train.steps=9", "train.save_every=9", "train.eval_every=0",
                                                        "name=c", f"out_dir={tmp_path}"])]) == 0
    shutil.copytree(tmp_path / "c" / "ckpt-00000009", tmp_path / "r" / "ckpt-00000009")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "written by run 'c', config.yaml is run 'r': copied from another run?" in err, err
    assert "another run? model.block.attention.kind: 'cem' -> 'llama'; " in err and "solver" not in err, err


def test_warnings_are_one_plain_line(capsys):
    from energyformer.cli import _show_warning

    _show_warning(UserWarning("resuming with a changed\n train config: steps: 2 -> 3"), UserWarning, "x.py", 3)
    err = capsys.readouterr().err
    assert err == "energyformer: warning: resuming with a changed train config: steps: 2 -> 3\n"


def test_eval_with_every_checkpoint_broken_names_each_reason(tmp_path, capsys):
    """eval of a run whose checkpoints all fail verification names why each one failed (newest first), not only
    the newest's reason, which can hide that an older one broke differently."""
    ov = TINY + ["train.steps=2", "train.save_every=1", "train.keep_checkpoints=2", "train.eval_every=0", "name=r",
                 f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", *_sets(ov)]) == 0
    capsys.readouterr()
    run = tmp_path / "r"
    (run / "ckpt-00000002" / "manifest.json").unlink()
    weights = next((run / "ckpt-00000001").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no valid checkpoint" in err and "ckpt-00000002" in err and weights.name in err, err
    assert "none of them loads: train the run again" in err and "train it first" not in err, err  # it was trained
    assert err.count("\n") == 1, err
