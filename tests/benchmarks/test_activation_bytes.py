"""benchmarks/activation_bytes.py at a tiny size: the saved-activation count is per token and layer, and
orders the paths as their designs say (the kernel keeps nothing N × N, the blocked path its
probabilities, the fused path every head's D_r + D wide keys)."""

from __future__ import annotations

import pytest

from .bench_script import load_bench


def test_saved_bytes_per_token_and_layer_order_the_paths(tmp_path, capsys):
    pytest.importorskip("triton")
    bench = load_bench("activation_bytes")
    out = tmp_path / "act.md"
    bench.main(["--dim", "32", "--heads", "4", "--mlp-hidden", "64", "--vocab", "97", "--seq", "16",
                "--precisions", "fp32", "--out", str(out), "--models",
                "full CEM T=1 (auto path); full CEM T=1, blocked path; full CEM T=1, fused path; "
                "full CEM T=1, kernel with one program per head (64 × 32)"])
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| model")}
    per = {name: float(r[0].replace(",", "")) for name, r in rows.items()}
    assert rows["Llama baseline"][1].startswith("1.00")
    kernel, blocked, fused = (per[f"full CEM T=1{s}"] for s in (" (auto path)", ", blocked path", ", fused path"))
    assert 0 < kernel < blocked < fused
    assert per["full CEM T=1, kernel with one program per head (64 × 32)"] == kernel  # same tensors saved
    assert out.read_text().startswith("# Activations saved for backward")
    assert set(rows) == {"Llama baseline", "full CEM T=1 (auto path)", "full CEM T=1, blocked path",
                         "full CEM T=1, fused path", "full CEM T=1, kernel with one program per head (64 × 32)"}


def test_one_more_layer_is_what_is_counted(monkeypatch):
    """the double difference removes what a forward saves once and per token outside the layers"""
    bench = load_bench("activation_bytes")
    sizes = {}

    def fake(model, idx, precision):
        layers, n = len(model.layers), idx.shape[1]
        sizes[layers, n] = 1000 + 7 * n + 11 * layers * n  # once + per token outside + per token and layer
        return sizes[layers, n]

    monkeypatch.setattr(bench, "saved_bytes", fake)
    args = type("A", (), dict(vocab=97, dim=16, heads=2, mlp_hidden=32, seq=8, batch=1))()
    assert bench.per_token_layer(bench.models()["Llama baseline"], args, "fp32") == 11
