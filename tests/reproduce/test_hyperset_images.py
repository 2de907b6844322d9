"""reproduce hyperset-images: rows collected with their device, results.json, benchmark tables (no training)."""

import json

from energyformer.reproduce.hyperset_images import benchmark_sections, collect, results_json


def _fake_run(out, ds, name, acc, device):
    d = out / ds / name
    d.mkdir(parents=True)
    row = {"name": name, "config_name": name, "seed": 0, "test_accuracy": acc, "val_accuracy": acc,
           "params": {"total": 1000}, "width": 8, "config": {"big": 1}, "confusion": [[1]]}
    (d / "result.json").write_text(json.dumps(row))
    (d / "run_info.json").write_text(json.dumps({"device": device}))


def test_collect_results_json_and_benchmark(tmp_path):
    _fake_run(tmp_path, "fashion_mnist", "et", 0.5, "cuda:0")
    _fake_run(tmp_path, "fashion_mnist", "crate", 0.6, "cpu")
    rows = collect(tmp_path, "fashion_mnist")
    assert {k: r["device"] for k, r in rows.items()} == {"et": "cuda:0", "crate": "cpu"}
    report = tmp_path / "report"
    report.mkdir()
    results_json(tmp_path, ["fashion_mnist"], report)
    data = json.loads((report / "results.json").read_text())["fashion_mnist"]
    assert data["runs"]["et"]["test_accuracy"] == 0.5 and "config" not in data["runs"]["et"]
    lowest = next(c for c in data["orderings"] if c["claim"].startswith("Energy Transformer"))
    assert lowest["here"] is None  # Hyper-SET and others not run: not claimed either way
    assert "not run" in benchmark_sections(tmp_path)[0]
    (tmp_path / "benchmark_cpu.md").write_text("| model |\n")
    assert benchmark_sections(tmp_path)[-1] == "| model |\n"
