"""reproduce hyperset-sudoku: the page's verdicts follow the stored numbers and it shows the paper's numbers
beside ours with their source; --report-only re-renders the committed page byte for byte (the claim rules
themselves: tests/analysis/test_sudoku_claims.py); the GPU preset end to end at toy size."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from energyformer.reproduce.hyperset_sudoku import main, render

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "hyperset" / "results.json"


def _res() -> dict:
    return json.loads(RESULTS.read_text())


def test_board_verdicts_follow_the_numbers_and_the_page_states_both():
    res = _res()
    flipped = copy.deepcopy(res)
    hs, tf = flipped["models"]["Hyper-SET"], flipped["models"]["Transformer"]
    hs["board_L"], tf["board_L"] = 60.0, 50.0
    page = render(flipped, hs["L"])
    assert "54.70" in page and "49.30" in page and "notebooks/sudoku/test_time_extrapolation.ipynb" in page
    line = next(x for x in page.splitlines() if x.startswith("| §5.1: Hyper-SET beats"))
    assert "| HOLDS (margin +10 points" in line and "60.00 vs 50.00" in line
    line = next(x for x in render(res, hs["L"]).splitlines() if x.startswith("| §5.1: Hyper-SET beats"))
    assert "UNTESTABLE (both at the floor" in line


def test_report_only_renders_the_folder_from_its_results_json(tmp_path):
    import shutil

    shutil.copy(RESULTS, tmp_path / "results.json")
    assert main(["--report-only", "--out", str(tmp_path)]) == 0
    committed = (RESULTS.parent / "README.md").read_text()
    assert (tmp_path / "README.md").read_text() == committed
    assert (tmp_path / "learning_curves.png").exists()
    assert (tmp_path / "results.json").read_text() == RESULTS.read_text()  # the artifact is not rewritten


def test_gpu_preset_runs_end_to_end_at_toy_size(tmp_path, monkeypatch):
    """``--scale gpu`` with tiny overrides trains both models (bf16 autocast, here on the CPU), scores
    them at L and 2L on the test split and on a ``--puzzles`` file, and writes the report with the
    learning curves; the preset's recipe (lr, batch, precision, givens) is what the runs used."""
    from energyformer.data.sudoku import generate_puzzles
    from energyformer.reproduce.hyperset_sudoku import GPU_PRESET, main

    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))  # the tiny generated set stays here
    p, s, _ = generate_puzzles(3, (45, 55), seed=5)
    puzzles = tmp_path / "hard.txt"
    puzzles.write_text("".join(f"{''.join(map(str, a))},{''.join(map(str, b))}\n" for a, b in zip(p, s)))
    tiny = ["model.dim=16", "model.heads=2", "model.iterations=2", "task.eval_iterations=[4]", "train.steps=2",
            "task.generate={n_train: 16, n_validation: 4, n_test: 4, givens: [45, 55]}", "train.eval_every=1",
            "task.eval_max=4", "task.workers=1"]
    rep = tmp_path / "report"
    argv = ["--scale", "gpu", "--out", str(tmp_path / "runs"), "--report", str(rep), "--puzzles", str(puzzles),
            "--test-boards", "4", "--trace-boards", "2"]
    assert main(argv + [a for o in tiny for a in ("--set", o)]) == 0
    res = json.loads((rep / "results.json").read_text())
    assert res["scale"] == "gpu" and "train.lr=3e-4" in GPU_PRESET
    for name in ("Hyper-SET", "Transformer"):
        r = res["models"][name]
        cfg = r["config"]
        assert (cfg["train"]["lr"], cfg["task"]["batch_size"], cfg["train"]["precision"]) == (3e-4, 64, "bf16")
        assert r["L"] == 2 and set(r["puzzles"][str(puzzles)]) == {"2", "4"}
        assert [e["step"] for e in r["eval_history"]] == [1, 2]
    assert res["models"]["Transformer"]["config"]["model"]["block"]["mlp"]["kind"] == "relu"
    page = (rep / "README.md").read_text()
    assert page.startswith("# Hyper-SET on Sudoku: GPU-scale reproduction") and "learning_curves.png" in page
    assert (rep / "learning_curves.png").stat().st_size > 0
