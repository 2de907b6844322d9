"""--resume under another task config is refused (like another model config), naming every changed
``task.<key>`` with both values. It used to continue with a mere steps warning (task.val_fraction: the
checkpoint then recorded 0.5 while config.yaml, which eval reads, still said 0.05), or to end in an
"internal error" from the batcher (task.seq_len, task.batch_size)."""

from __future__ import annotations

import json

import pytest
import yaml

from energyformer.cli import main
from energyformer.errors import ConfigError
from energyformer.train.resume import check_task_config, task_changes

TINY = ["model.dim=32", "model.n_layers=2", "model.heads=2", "model.max_seq_len=32", "task.seq_len=32",
        "task.batch_size=4", "task.eval_batch_size=4", "task.eval_max_batches=2", "train.progress=false",
        "train.tensorboard=false", "train.log_every=1", "train.save_every=2", "train.eval_every=2"]


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


def _snapshot(run):
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "lm/llama", *_sets(TINY + ["train.steps=2", "name=r", f"out_dir={root}"])]) == 0
    return root


@pytest.mark.parametrize("changes, named", [
    (["task.seq_len=16"], ["task.seq_len: 32 -> 16"]),
    (["task.batch_size=2"], ["task.batch_size: 4 -> 2"]),
    (["task.val_fraction=0.5", "task.eval_max_batches=3"],
     ["task.val_fraction: 0.05 -> 0.5", "task.eval_max_batches: 2 -> 3"]),
])
def test_resume_refuses_a_changed_task_naming_each_key(trained, capsys, changes, named):
    run = trained / "r"
    before = _snapshot(run)
    capsys.readouterr()
    code = main(["train", "lm/llama", "--resume",
                 *_sets(TINY + ["train.steps=4", "name=r", f"out_dir={trained}", *changes])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "internal error" not in err, err
    assert err.startswith("energyformer: error: task config differs from the one checkpoint"), err
    assert "the task must match to resume" in err and str(run / "config.yaml") in err, err
    for text in named:
        assert text in err, err
    # nothing was trained or recorded: no new checkpoint, no config-resume-*.yaml, run_info unchanged
    assert _snapshot(run) == before
    assert sorted(p.name for p in run.glob("ckpt-*")) == ["ckpt-00000002"]


def test_a_train_change_still_resumes_and_config_yaml_keeps_describing_the_run(trained, capsys):
    root = trained.parent / "again"
    ov = TINY + ["name=a", f"out_dir={root}"]
    assert main(["train", "lm/llama", *_sets(ov + ["train.steps=2"])]) == 0
    assert main(["train", "lm/llama", "--resume", *_sets(ov + ["train.steps=4"])]) == 0
    run = root / "a"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    from energyformer.train import load_checkpoint

    assert load_checkpoint(run / "ckpt-00000004", verify=False)["run_config"]["task"] == cfg["task"]
    assert json.loads((run / "run_info.json").read_text())["resumes"][0]["step"] == 2


def test_an_edited_task_in_config_yaml_is_refused_naming_the_file(trained, capsys, tmp_path):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(trained / "r", run)
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["task"]["eval_max_batches"] = 5
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    capsys.readouterr()
    code = main(["train", "lm/llama", "--resume", *_sets(TINY + ["train.steps=4", "name=r", f"out_dir={tmp_path}"])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{path} does not match checkpoint" in err and "task.eval_max_batches: 2 -> 5" in err, err


def _sudoku(**kw):
    task = {"kind": "sudoku", "source": "generated", "generate": {"seed": 0, "train": 100}, "batch_size": 16,
            "eval_iterations": [16], "workers": 1}
    task.update(kw)
    return task


def test_task_changes_names_dotted_keys_and_lets_only_documented_keys_change():
    assert task_changes(_sudoku(), _sudoku()) == []
    # task.workers: processes generating the data, identical data for any number (documented)
    assert task_changes(_sudoku(), _sudoku(workers=4)) == []
    assert task_changes(_sudoku(), _sudoku(generate={"seed": 1, "train": 100}, eval_iterations=[16, 32])) == [
        "task.generate.seed: 0 -> 1", "task.eval_iterations: [16] -> [16, 32]"]
    # another kind is reported alone
    assert task_changes(_sudoku(), {"kind": "lm", "batch_size": 4}) == ["task.kind: 'sudoku' -> 'lm'"]
    # a key recorded on one side only (added to the task config since the checkpoint was written)
    old = _sudoku()
    del old["eval_iterations"]
    assert task_changes(old, _sudoku()) == []


def test_check_task_config_skips_checkpoints_without_a_recorded_task(tmp_path):
    check_task_config(None, {"task": _sudoku()}, "ckpt", tmp_path)
    check_task_config({"task": "toy"}, {"task": _sudoku()}, "ckpt", tmp_path)
    with pytest.raises(ConfigError, match=r"task.batch_size: 16 -> 8"):
        check_task_config({"task": _sudoku()}, {"task": _sudoku(batch_size=8)}, "ckpt", tmp_path)


def test_eval_refuses_a_run_whose_config_yaml_task_was_edited(trained, capsys, tmp_path):
    """Found by an outside probe: eval read an edited task from config.yaml (a Potts coupling seed, a Sudoku
    generator seed, the givens) and scored another data set under the run's name; only the model was checked."""
    import shutil

    run = tmp_path / "r"
    shutil.copytree(trained / "r", run)
    assert main(["eval", str(run)]) == 0
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["task"]["val_fraction"] = 0.2
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} does not match checkpoint" in err and "task.val_fraction" in err, err
