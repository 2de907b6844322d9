"""Issue 25 classes 2 and 3: reproduction arguments out of range, or that do nothing, are refused at
once; results files that are binary, empty or of the wrong kind are errors naming the file."""

import pytest

from energyformer.cli import main

REFUSED = [
    (["hyperset-sudoku", "--scale", "tpu"], "--scale"),
    (["hyperset-images", "--jobs", "-3"], "--jobs"),
    (["cem-lm", "--jobs", "0"], "--jobs"),
    (["cem-gp", "--scale", "tpu"], "--scale"),
    (["eqt", "--jobs", "0"], "--jobs"),
    (["intrinsic-lm", "--scale", "tpu"], "--scale"),
]


@pytest.mark.parametrize("args, what", REFUSED, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_bad_reproduction_arguments_are_refused_before_work(args, what, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default output folders land here
    with pytest.raises(SystemExit) as e:
        main(["reproduce", *args])
    assert e.value.code == 2
    assert what in capsys.readouterr().err


@pytest.mark.parametrize("content, why", [(b"\x00\xff\xfe binary", ":1:2: not UTF-8 text"), (b"", "empty file"),
                                          (b"{\"a\": 1,", ":1:9: not valid JSON"),
                                          (b"[1, 2]", "holds a JSON list"), (b"{\"a\": 1}", "lacks the key")])
def test_results_files_that_are_not_results_name_the_file(content, why, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "o" / "cpu").mkdir(parents=True)
    study = tmp_path / "o" / "cpu" / "results.json"
    study.write_bytes(content)
    for args, f in ((["cem-lm", "--report-only", "--out", str(tmp_path / "o")], study),
                    (["eqt", "--report-only", "--out", str(tmp_path / "o")], study)):
        assert main(["reproduce", *args]) == 2
        err = capsys.readouterr().err
        assert str(f) in err and why in err and err.count("\n") == 1, err


def test_bare_sa_report_only_on_an_empty_folder_is_an_error(tmp_path, capsys):
    assert main(["reproduce", "bare-sa", "--report-only", "--out", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "<scale>/results.json" in err and err.count("\n") == 1
    assert not (tmp_path / "empty").exists()


@pytest.mark.parametrize("extra", [["--only", "model=et"], ["--jobs", "4"], ["--set", "train.steps=3"],
                                   ["--scale", "cpu"], ["--seeds", "0"], ["--runs", "r"]])
def test_report_only_refuses_the_options_of_a_run(extra, tmp_path, capsys):
    """--report-only renders the records as they are: an option of a run was silently ignored"""
    (tmp_path / "o").mkdir()
    assert main(["reproduce", "hyperset-sudoku", "--report-only", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert f"--report-only trains nothing and renders every scale's records in OUT as they are: {extra[0]} would " \
           "be ignored (allowed with it: --out)" in err and err.count("\n") == 1, err
    assert not any((tmp_path / "o").iterdir())


def test_pages_name_their_folder_as_dir_not_the_studys_own(tmp_path):
    """a page rendered into a user's --out says DIR, not docs/results/...: its commands copied from there would
    have trained into, or rendered into, the repository's pages"""
    (tmp_path / "o").mkdir()
    assert main(["reproduce", "hyperset-sudoku", "--report-only", "--out", str(tmp_path / "o")]) == 0
    index = (tmp_path / "o" / "README.md").read_text()
    assert "--report-only --out DIR` (DIR: this folder; the study's own is `docs/results/hyperset`)" in index
    assert "not run yet: `energyformer reproduce hyperset-sudoku --scale cpu --out DIR`" in index
    assert "--out docs/results" not in index


@pytest.mark.parametrize("study", ["hyperset-sudoku", "intrinsic-lm", "cem-gp"])
def test_the_gpu_scale_without_a_gpu_is_refused_before_work(study, tmp_path, capsys, monkeypatch):
    """Once: `reproduce hyperset-sudoku --scale gpu` on a CPU machine started the 4,000-step d 768 preset there (its
    scale does not name a device); every gpu scale is now refused in one line without CUDA, unless forced."""
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["reproduce", study, "--scale", "gpu", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--scale gpu: the preset is sized for one GPU and no CUDA device is available here" in err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists() and not (tmp_path / "o").exists()
