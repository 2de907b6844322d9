"""The argument checks, run wrapper and run header benchmarks/_page.py gives every benchmark script (probe K,
B1/B5/B6). Before them each script took ``type=int`` / free strings: ``--precisions fp16`` ran float32 labelled
"fp16", ``--repeats 0`` ended in a traceback, a library ConfigError printed a traceback, and only host_time.py
named the commit in its output."""
from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
import torch

from energyformer.errors import ConfigError

from .bench_script import load_bench

ROOT = Path(__file__).resolve().parents[2]
page = load_bench("_page")


def test_precisions_are_checked_and_normalised():
    """Old: no check at all; any string was a precision (float32 under its name)."""
    assert page.precisions("fp32, bf16") == "fp32,bf16"
    for bad in ("fp16", "fp32,bogus", "", "fp32,"):
        with pytest.raises(argparse.ArgumentTypeError, match="allowed: a comma-separated list of bf16, fp32"):
            page.precisions(bad)
    assert page.check_precision("bf16") == "bf16"
    with pytest.raises(ConfigError, match="'fp16' is not one of bf16, fp32"):
        page.check_precision("fp16")


def test_count_list_and_device_types():
    """Old: ``type=int`` everywhere (0 and -1 accepted), ``--mem-seqs abc`` a ValueError traceback, ``--device cuda``
    on a CPU build torch's AssertionError mid-run."""
    assert page.positive_int("3") == 3 and page.nonneg_int("0") == 0
    for conv, bad in ((page.positive_int, "0"), (page.nonneg_int, "-1"), (page.positive_int, "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            conv(bad)
    assert page.int_list("256,512") == [256, 512]
    for bad in ("abc", "256,0", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            page.int_list(bad)
    assert page.device_arg("cpu") == "cpu"
    with pytest.raises(argparse.ArgumentTypeError, match="allowed: cpu, cuda"):
        page.device_arg("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(argparse.ArgumentTypeError, match="no CUDA device"):
            page.device_arg("cuda")


def test_header_names_device_threads_torch_and_commit():
    """Old: no shared header; most outputs lacked the commit (it was added by hand)."""
    # the full sha, cut as the header cuts it: `--short` grows past 7 characters in a repository with more
    # objects (CI's clone printed 8cd627e3 where the header says 8cd627e)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout[:7]
    line = page.header("cpu", threads=3)
    assert "\n" not in line and line.startswith("run: device cpu (")
    assert "3 torch thread(s)" in line and f"torch {torch.__version__}" in line
    assert f"commit {head}" in line and "cores" in line and " UTC" in line
    assert page.machine()["commit"] == page.git_commit()


def test_run_turns_library_errors_into_one_line(capsys, monkeypatch):
    """Old: a ConfigError from the library (e.g. ``--heads 3 --dim 16``) surfaced as a full traceback."""
    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)

    def bad_config():
        raise ConfigError("attention.heads = 3: must divide dim = 16")

    def bad_value():
        raise ValueError("heads = 3: must divide dim = 16")

    for main, text in ((bad_config, "error: attention.heads = 3: must divide dim = 16"),
                       (bad_value, "error: ValueError: heads = 3: must divide dim = 16")):
        with pytest.raises(SystemExit) as exc:
            page.run(main)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        page.run(lambda: None)
    assert exc.value.code == 0
    with pytest.raises(KeyError):  # a bug in a script stays a traceback
        page.run(lambda: {}["x"])


def test_load_words_say_under_load_only_when_something_else_ran():
    """Old: two pages said '**under load** from other developers' jobs' whatever the recorded load average."""
    assert page.load_words({"load_before": [6.08, 5.0, 4.0]}) == "**under load** from other jobs"
    assert page.load_words({"load_before": [0.4, 0.3, 0.2]}) == "with nothing else running"
    assert page.load_words({}) == "(load not recorded)"
