"""benchmarks/_timing.py: interleaving with a rotated start, medians, per-repeat ratios (fast; no timing)."""

from __future__ import annotations

import torch

from .bench_script import load_bench

timing = load_bench("_timing")


def test_interleaved_times_counts_every_repeat():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    t = timing.interleaved_times(fns, warmup=1, repeats=3, device=torch.device("cpu"))
    assert [len(v) for v in t.values()] == [3, 3] and len(calls) == 8
    assert calls[2:] == ["a", "b", "b", "a", "a", "b"]  # rotated start each repeat
    assert timing.median([3.0, 1.0, 2.0]) == 2.0 and timing.median([1.0, 2.0, 3.0, 4.0]) == 2.5


def test_paired_ratio_is_per_repeat():
    t = {"base": [1.0, 2.0, 4.0], "v": [2.0, 2.0, 2.0]}
    assert timing.paired_ratio(t, "base", "v") == (1.0, 0.5, 2.0)
