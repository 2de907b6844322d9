"""Timing helpers shared by the benchmark scripts: variants interleaved in every repeat (the starting one rotated, so
a load change on a shared machine hits all of them alike), medians and ranges, and paired ratios taken repeat by
repeat (a ratio from one run, never from two). ``median`` is the standard library's (re-exported for the scripts)."""

from __future__ import annotations

import time
from statistics import median
from typing import Callable

import torch


def paired_ratio(times: dict[str, list[float]], base: str, name: str) -> tuple[float, float, float]:
    """Median, min and max over repeats of time[base] / time[name] (tokens/s ratio), repeat by repeat."""
    r = [b / t for b, t in zip(times[base], times[name])]
    return median(r), min(r), max(r)


def interleaved_times(fns: dict[str, Callable[[], None]], warmup: int, repeats: int,
                      device: torch.device) -> dict[str, list[float]]:
    """Seconds of every timed call of each fn; calls interleaved, starting fn rotated every repeat."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    sync()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            sync()
            t0 = time.perf_counter()
            fns[n]()
            sync()
            times[n].append(time.perf_counter() - t0)
    return times


def spread(ts: list[float]) -> str:
    return f"[min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f} ms]"


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:9.1f} ms"
