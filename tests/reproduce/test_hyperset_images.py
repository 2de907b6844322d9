"""reproduce hyperset-images: rows collected with their device, merged into the page's results.json
(a rerun replaces a row wholly and keeps what it replaced), and --report-only re-renders a page folder
from its artifacts alone (no run folders read or created)."""

import json

import pytest

from energyformer.errors import DataError
from energyformer.reproduce.hyperset_images import benchmark_markdown, collect, main, write_mim, write_results


def _fake_run(out, ds, name, acc, device, **extra):
    d = out / ds / name
    d.mkdir(parents=True)
    row = {"name": name, "config_name": name.split("_seed")[0], "seed": int(name.split("_seed")[1]) if "_seed" in name else 0,
           "test_accuracy": acc, "val_accuracy": acc, "params": {"total": 1000}, "width": 8, "config": {"big": 1},
           "confusion": [[3, 1], [0, 4]], "class_acc": [0.75, 1.0], "classes": ["a", "b"], "steps": 10,
           "batch_size": 2, "train_examples": 20, "iterations": 2, "train_images_per_s": 5.0, **extra}
    (d / "result.json").write_text(json.dumps(row))
    (d / "run_info.json").write_text(json.dumps({"device": device}))


def test_collect_write_results_and_benchmark(tmp_path):
    _fake_run(tmp_path, "fashion_mnist", "et", 0.5, "cuda:0")
    _fake_run(tmp_path, "fashion_mnist", "crate", 0.6, "cpu")
    rows = collect(tmp_path, "fashion_mnist")
    assert {k: r["device"] for k, r in rows.items()} == {"et": "cuda:0", "crate": "cpu"}
    report = tmp_path / "report"
    report.mkdir()
    # the committed page had et at 0.4 and a row not rerun (hyperset): et is replaced wholly, hyperset kept
    (report / "results.json").write_text(json.dumps(
        {"page": {"notes": ["old note"]}, "fashion_mnist": {"runs": {"et": {"test_accuracy": 0.4, "val_accuracy": 0.41},
                                                                     "hyperset": {"test_accuracy": 0.7}}}}))
    assert benchmark_markdown(tmp_path) is None
    (tmp_path / "benchmark_cpu.md").write_text("| model |\n")
    data = write_results(tmp_path, ["fashion_mnist"], report)
    assert data == json.loads((report / "results.json").read_text())
    runs = data["fashion_mnist"]["runs"]
    assert runs["et"]["test_accuracy"] == 0.5 and "config" not in runs["et"] and runs["et"]["confusion"]
    assert runs["et"]["replaces"] == {"test_accuracy": 0.4, "val_accuracy": 0.41, "git_commit": None}
    assert "replaces" not in runs["crate"] and runs["hyperset"] == {"test_accuracy": 0.7}
    assert data["page"] == {"notes": ["old note"], "benchmark_markdown": "| model |\n"}
    # another page's seed spread as this page's declared band
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"fashion_mnist": {"runs": {"hyperset": {"test_accuracy": 0.70, "seed": 0},
                                                            "hyperset_seed1": {"test_accuracy": 0.68, "seed": 1,
                                                                               "config_name": "hyperset"}}}}))
    data = write_results(tmp_path, ["fashion_mnist"], report, notes=["new"], noise_from=other)
    assert data["page"]["notes"] == ["new"] and abs(data["page"]["noise"]["values"]["test_accuracy"] - 2.0) < 1e-9


def _page_folder(tmp_path):
    out = tmp_path / "runs"
    _fake_run(out, "fashion_mnist", "hyperset", 0.69, "cpu")
    _fake_run(out, "fashion_mnist", "hyperset_seed1", 0.68, "cpu")
    _fake_run(out, "fashion_mnist", "transformer", 0.74, "cpu")
    page = tmp_path / "page"
    write_results(out, ["fashion_mnist"], page, notes=["a note"])
    return page


def test_report_only_rebuilds_from_the_folder_alone(tmp_path, monkeypatch):
    page = _page_folder(tmp_path)
    (page / "sub").mkdir()
    (page / "sub" / "results.json").write_text((page / "results.json").read_text())
    empty = tmp_path / "cwd"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["--report-only", "--out", str(page)]) == 0
    first = (page / "README.md").read_text()
    assert (page / "sub" / "README.md").read_text() == first  # subfolders are pages too
    assert "a note" in first and "Every claim" in first and "UNTESTABLE" in first
    assert list(empty.iterdir()) == []  # no runs/ (or anything else) created where it ran
    (page / "README.md").write_text("edited by hand\n")
    assert main(["--report-only", "--out", str(page)]) == 0
    assert (page / "README.md").read_text() == first  # byte-for-byte the same page again


def test_report_only_refuses_an_empty_folder_and_training_options(tmp_path):
    with pytest.raises(DataError, match="nothing to re-render"):
        main(["--report-only", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["--report-only", "--out", str(tmp_path), "--only", "hyperset"])


def test_write_mim_merges_runs(tmp_path):
    assert write_mim(tmp_path, tmp_path / "page") is None
    d = tmp_path / "mim" / "fashion_mnist" / "mim_hyperset"
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps({"name": "mim_hyperset", "eval": {"psnr": 12.0}}))
    data = write_mim(tmp_path, tmp_path / "page")
    assert data == {"runs": {"mim_hyperset": {"name": "mim_hyperset", "eval": {"psnr": 12.0}}}}
    assert json.loads((tmp_path / "page" / "mim.json").read_text()) == data
