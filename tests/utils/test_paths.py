"""Issue 25 class 5: unwritable output paths are refused before any work, saying they cannot be written."""

import time
from pathlib import Path

import pytest

from energyformer.cli import main
from energyformer.errors import ConfigError
from energyformer.utils.paths import check_writable_dir, check_writable_file


def test_writable_folder_and_file_pass_and_are_created(tmp_path):
    assert check_writable_dir(tmp_path / "a" / "b").is_dir()
    assert check_writable_file(tmp_path / "c" / "x.png") == tmp_path / "c" / "x.png"
    assert not list((tmp_path / "a" / "b").iterdir())  # the probe file is removed


@pytest.mark.parametrize("path, why", [("/proc/x.png", "cannot be written"), ("/proc/x/y.md", "cannot be written")])
def test_unwritable_file_is_refused(path, why):
    with pytest.raises(ConfigError, match=f"--report {path}: {why}"):
        check_writable_file(path, "--report")


def test_folder_in_place_of_a_file_and_file_in_place_of_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="it is a file, not a folder"):
        check_writable_dir(tmp_path / "f", "--out")
    with pytest.raises(ConfigError, match="a parent of the path is a file"):
        check_writable_dir(tmp_path / "f" / "sub", "--out")
    with pytest.raises(ConfigError, match="it is a folder, not a file"):
        check_writable_file(tmp_path, "--confusion")


@pytest.mark.parametrize("argv,what", [
    (["hyperset-images", "--runs", "/proc/x/runs"], "--runs /proc/x/runs: cannot be written"),
    (["hyperset-sudoku", "--out", "/proc/x"], "--out /proc/x: cannot be written"),      # a study
    (["eqt", "--runs", "/proc/x"], "--runs /proc/x: cannot be written"),
])
def test_reproduction_refuses_an_unwritable_output_before_training(capsys, argv, what):
    t0 = time.perf_counter()
    try:  # refused by argparse (SystemExit 2) or as a one-line ConfigError (exit status 2)
        rc = main(["reproduce", *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == 2 and time.perf_counter() - t0 < 30
    err = capsys.readouterr().err
    assert what in err and not list(Path("/proc").glob("x"))


def test_an_empty_path_is_refused_not_taken_for_the_current_folder(capsys):
    """``--out ""`` (an unset shell variable) trained into runs/ under the config's out_dir, silently."""
    for check in (check_writable_dir, check_writable_file):
        for empty in ("", "  "):
            with pytest.raises(ConfigError, match=r"--out '\s*': an empty path; give a folder or file name"):
                check(empty, "--out")
    with pytest.raises(SystemExit):
        main(["train", "lm/llama", "--out", ""])
    assert "--out '': an empty path" in capsys.readouterr().err
