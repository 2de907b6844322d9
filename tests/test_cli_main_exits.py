"""How ``energyformer`` ends (cli.main): Ctrl-C in train prints the command that resumes it, pasteable as the same
arguments, exit 130; ENERGYFORMER_DEBUG=1 gives the traceback instead of the one line; ``list`` lists configs."""

from __future__ import annotations

import shlex

import pytest

import energyformer.cli as cli
from energyformer.cli import main
from energyformer.utils.validate import ConfigError


def test_ctrl_c_in_train_prints_the_resume_command(tmp_path, capsys, monkeypatch):
    def interrupted(a, extra):
        raise KeyboardInterrupt

    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_train", interrupted)
    out = tmp_path / "my runs"
    assert main(["train", "lm/llama", "--out", str(out), "--set", "train.steps=5", "--set", "k={a: 2}"]) == 130
    err = capsys.readouterr().err
    cmd = err.split("continue with: ", 1)[1].strip()
    assert shlex.split(cmd) == ["energyformer", "train", "lm/llama", "--resume", "--out", str(out),
                                "--set", "train.steps=5", "--set", "k={a: 2}"], err


def test_ctrl_c_elsewhere_is_one_line_exit_130(capsys, monkeypatch):
    def interrupted(a, extra):
        raise KeyboardInterrupt

    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_list", interrupted)
    assert main(["list", "configs"]) == 130
    assert capsys.readouterr().err == "\nenergyformer: interrupted\n"


def test_energyformer_debug_gives_the_traceback(monkeypatch, capsys):
    monkeypatch.setenv("ENERGYFORMER_DEBUG", "1")
    with pytest.raises(ConfigError, match="config 'no/such/config' not found"):
        main(["config", "no/such/config"])
    monkeypatch.setenv("ENERGYFORMER_DEBUG", "0")
    assert main(["config", "no/such/config"]) == 2
    assert capsys.readouterr().err.startswith("energyformer: error: config 'no/such/config' not found")


def test_a_library_warning_is_one_plain_line_on_the_command_line(capsys, monkeypatch):
    import warnings

    def warns(a, extra):
        warnings.warn("a changed\n  config", UserWarning, stacklevel=1)
        return 0

    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_list", warns)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main replaces it: put it back after
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["list"]) == 0
    assert capsys.readouterr().err == "energyformer: warning: a changed config\n"
