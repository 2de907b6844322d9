"""Smoke test of benchmarks/gpu_profile.py at its CPU size, and its host-side table (no timing checks)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from .bench_script import load_bench

bench = load_bench("gpu_profile")


def test_tiny_run_lists_each_model_with_its_operators(tmp_path, capsys):
    out = tmp_path / "p.md"
    bench.main(["--suite", "hyperset", "--tiny", "--rows", "5", "--out", str(out)])
    printed = capsys.readouterr().out  # the output so far, again after each model
    text = out.read_text()
    assert printed.endswith(text)
    for name in bench.HYPERSET_MODELS:
        assert text.count(f"## {name}\n") == 1
    assert text.count("no device: self CPU time below") == len(bench.HYPERSET_MODELS)
    assert "host: self CPU time" not in text  # the host table is a device run's second view


def test_host_rows_rank_by_self_cpu_time_per_step():
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            (x @ x).relu()
    lines = bench.host_rows(prof.key_averages(), 2, 3)
    assert lines[1].startswith("host: self CPU time ") and lines[1].endswith("(with the profiler's own overhead)")
    rows = [line.split(" | ") for line in lines[5:]]
    assert len(rows) == 3
    per_step = [float(r[1]) for r in rows]
    assert per_step == sorted(per_step, reverse=True)
    assert any(r[0] == "| `aten::mm`" and r[3] == "1 |" for r in rows)  # two calls over two steps


def test_python_rows_rank_functions_by_own_time_per_step():
    """--python N: cProfile's table of the Python functions with the most own time, per step"""
    def slow_python() -> float:
        return sum(i * i for i in range(20000))

    def step() -> None:
        slow_python()
        torch.randn(8, 8).relu()

    lines = bench.python_rows(step, 2, torch.device("cpu"), 4)
    assert lines[1].startswith("Python (cProfile, 2 steps): own time ")
    rows = [line.split(" | ") for line in lines[5:]]
    assert len(rows) == 4
    own = [float(r[1]) for r in rows]
    assert own == sorted(own, reverse=True)
    assert any("<genexpr>" in r[0] and r[4] == "20001 |" for r in rows[:2])   # the generator and sum: the most
    assert any("torch.randn" in r[0] and r[4] == "1 |" for r in rows)  # once a step over two steps


def test_tiny_run_with_python_rows(tmp_path):
    out = tmp_path / "p.md"
    bench.main(["--suite", "hyperset", "--tiny", "--rows", "3", "--python", "5", "--models", "Hyper-SET",
                "--out", str(out)])
    text = out.read_text()
    assert text.count("Python (cProfile, 1 steps)") == 1
