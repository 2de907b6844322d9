"""benchmarks/cem_attention.py runs end to end at toy size (both sections; its memory section once failed on
the dense reference: MemTracker saw the ALiBi slopes' module called twice)."""
from __future__ import annotations

import re

from .bench_script import load_bench


def test_cem_attention_benchmark_runs_both_sections_at_toy_size(capsys):
    load_bench("cem_attention").main(["--dim", "16", "--heads", "2", "--seq", "16", "--batch", "1",
                                      "--repeats", "1", "--precisions", "fp32", "--mem-seqs", "256,512"])
    out = capsys.readouterr().out
    assert "T2/T1 =" in out
    dense = next(line for line in out.splitlines() if "dense N×N energy (reference)" in line)
    sizes = [float(v) for v in re.findall(r"N=\d+\s+([\d.]+)", dense)]
    assert len(sizes) == 2 and 0 < sizes[0] < sizes[1]   # the N×N scores grow with N
