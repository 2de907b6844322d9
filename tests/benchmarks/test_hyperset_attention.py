"""benchmarks/hyperset_attention.py runs and reports consistent rows (tiny N; no timing claims)."""

import pytest

from .bench_script import load_bench


@pytest.mark.slow  # four fresh subprocesses for the peak-memory readings
def test_tiny_attention_rows(capsys):
    b = load_bench("hyperset_attention")
    rows = b.bench_attention(1, [16])
    assert [(r["N"], r["backward"]) for r in rows] == [(16, False), (16, True)]
    for r in rows:
        assert r["time_fused_ms"] > 0 and r["time_einsum_ms"] > 0 and r["time_ratio"] > 0
        assert r["mem_fused_MB"] >= 0 and r["mem_einsum_MB"] >= 0
    assert "time ratio" in capsys.readouterr().out


def test_page_renders_from_raw_json_only():
    """The page of --render-only is a function of the two raw outputs (no measuring)."""
    b = load_bench("hyperset_attention")
    meta = {"threads": 1, "torch": "x", "cpus": 2, "nice": 10, "load_before": [5.0, 1, 1], "load_after": [4.0, 1, 1],
            "command": "python benchmarks/hyperset_attention.py"}
    rows = [{"N": 2048, "backward": bw, "times_fused_s": [0.1, 0.2], "times_einsum_s": [0.3, 0.3],
             "ratios": [0.33, 0.67], "mem_fused_MB": 10.0, "mem_einsum_MB": 50.0, "mem_ratio": 0.2} for bw in (0, 1)]
    sud = {"meta": meta, "settings": {"n": 20, "reps": 3, "climb_steps": 2000, "max_grids": 20, "solver_puzzles": 100},
           "generation": [{"givens": 30, "puzzles_per_s": [1.0, 2.0, 3.0], "dig_fail_rate": 0.0,
                           "climbs_per_puzzle": 0.0, "gave_up": 0, "reps": 3}],
           "solver": {"24 givens": [1e4, 2e4, 3e4]}}
    page = b.page({"meta": meta, "repeats": 2, "attention": rows, "training": None}, sud)
    assert page == b.page({"meta": meta, "repeats": 2, "attention": rows, "training": None}, sud)
    assert "under load" in page and "forward 0.20x (met)" in page
    assert "| 2048 | fwd | 150.00 [100.00, 200.00] | 300.00 [300.00, 300.00] | 0.50x [0.33, 0.67]" in page
    assert "| 30 | 2.0 [1.0, 3.0] | 0.0% | 0.0 | 0/3 |" in page and "| 24 givens | 20.0 [10.0, 30.0] |" in page
