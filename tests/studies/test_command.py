"""``energyformer reproduce NAME`` (studies/command.py main) hands run_study the scale, folders and options its
help promises: the default scale is cpu wherever the study lists it, ``--scale gpu`` without CUDA runs when
``--set train.device=...`` forces a device (the refusal says so), the default run folder is runs/NAME/SCALE, and an
--out that is no folder is refused before any run starts. run_study and the page rendering are replaced here."""

import copy
import pytest
import torch
import energyformer.studies.command as command
from energyformer.studies.command import parse_only
from energyformer.utils.validate import ConfigError
from .tiny import TINY, write


@pytest.fixture
def calls(monkeypatch):
    got = []
    monkeypatch.setattr(command, "run_study", lambda spec, name, scale, out, runs, **kw: got.append(
        dict(scale=scale, out=out, runs=runs, **kw)))
    monkeypatch.setattr(command, "render_pages", lambda *a: [])
    return got


def test_the_default_scale_is_cpu_wherever_the_study_lists_it(tmp_path, calls):
    data = copy.deepcopy(TINY)
    data["scales"] = {"gpu": {"overrides": ["train.device=cuda"]}, "cpu": {}}
    path = write(tmp_path / "s.yaml", **data)
    assert command.main(str(path), ["--out", str(tmp_path / "o"), "--runs", str(tmp_path / "r")]) == 0
    assert [c["scale"] for c in calls] == ["cpu"] and calls[0]["out"] == tmp_path / "o" / "cpu"


def test_the_gpu_scale_without_a_gpu_runs_where_a_device_is_forced(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = write(tmp_path / "s.yaml")
    args = ["--scale", "gpu", "--out", str(tmp_path / "o"), "--runs", str(tmp_path / "r")]
    with pytest.raises(ConfigError, match="force it with --set train.device=cpu"):
        command.main(str(path), args)
    assert command.main(str(path), [*args, "--set", "train.device=cpu"]) == 0
    assert [(c["scale"], c["sets"]) for c in calls] == [("gpu", ["train.device=cpu"])]


def test_the_default_run_folder_is_runs_name_scale(tmp_path, calls, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert command.main("eqt", ["--out", str(tmp_path / "o")]) == 0
    assert calls[0]["runs"].as_posix() == "runs/eqt/cpu" and (tmp_path / "runs" / "eqt" / "cpu").is_dir()


def test_an_out_that_is_a_file_is_refused_before_any_run(tmp_path, calls):
    (tmp_path / "o").write_text("not a folder")
    with pytest.raises(ConfigError, match="--out"):
        command.main(str(write(tmp_path / "s.yaml")), ["--out", str(tmp_path / "o"), "--runs", str(tmp_path / "r")])
    assert calls == []


# ``--only AXIS=LABEL[,LABEL...]`` (repeatable, studies/command.py): a malformed item is refused naming it, and two
# items of one axis select the labels of both (the union), as one item listing them does.


@pytest.mark.parametrize("item", ["model", "=eqt", "model=", "="])
def test_a_malformed_only_is_refused_naming_it(item):
    with pytest.raises(ConfigError) as err:
        parse_only(["length=8", item])
    assert str(err.value) == f"--only {item!r}: give AXIS=LABEL[,LABEL...]"


def test_two_only_items_of_one_axis_select_both():
    assert parse_only(["model=eqt", "length=8", "model=baseline,other"]) == {
        "model": ["eqt", "baseline", "other"], "length": ["8"]}
