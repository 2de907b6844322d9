"""benchmarks/hyperset_attention.py runs and reports consistent rows (tiny N; no timing claims)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hyperset_attention.py"


def _load():
    spec = importlib.util.spec_from_file_location("hyperset_attention_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # four fresh subprocesses for the peak-memory readings
def test_tiny_attention_rows(capsys):
    b = _load()
    rows = b.bench_attention(1, [16])
    assert [(r["N"], r["backward"]) for r in rows] == [(16, False), (16, True)]
    for r in rows:
        assert r["time_fused_ms"] > 0 and r["time_einsum_ms"] > 0 and r["time_ratio"] > 0
        assert r["mem_fused_MB"] >= 0 and r["mem_einsum_MB"] >= 0
    assert "time ratio" in capsys.readouterr().out
