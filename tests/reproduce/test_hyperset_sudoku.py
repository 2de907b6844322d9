"""reproduce hyperset-sudoku: the claim verdicts follow the stored numbers (they flip when the numbers do),
Fig. 5-6 claims are read from x¹ on (as the released code records them), and the page shows the paper's
numbers beside ours. Uses the committed results.json; trains nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from energyformer.analysis.hyperset import is_decreasing
from energyformer.reproduce.hyperset_sudoku import _claims, render

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "hyperset" / "results.json"


def _res() -> dict:
    return json.loads(RESULTS.read_text())


def _claims_of(res: dict) -> dict:
    L = res["models"]["Hyper-SET"]["L"]
    return _claims(res, {n: r["trajectory"] for n, r in res["models"].items()}, L, is_decreasing)


def test_stored_claims_match_the_stored_numbers():
    res = _res()
    assert _claims_of(res) == res["claims"]


def test_energy_claims_start_at_x1_and_flip_with_the_numbers():
    res = _res()
    t = res["models"]["Hyper-SET"]["trajectory"]
    L = res["models"]["Hyper-SET"]["L"]
    t["e_total"] = [10.0] + [float(9 - 0.1 * i) for i in range(2 * L)]  # x⁰ lowest, then falling from x¹
    c = _claims_of(res)
    assert c["energy_total_decreases_to_L"] and c["energy_total_decreases_to_2L"]
    assert not c["energy_total_rises_from_x0"]
    t["e_total"][0] = 1.0
    assert _claims_of(res)["energy_total_rises_from_x0"]
    t["e_total"][3] = 100.0  # a rise inside x¹ … x^L
    c = _claims_of(res)
    assert not c["energy_total_decreases_to_L"] and not c["energy_total_decreases_to_2L"]


def test_board_claims_flip_and_the_page_states_both_numbers():
    res = _res()
    flipped = copy.deepcopy(res)
    hs, tf = flipped["models"]["Hyper-SET"], flipped["models"]["Transformer"]
    hs["board_L"], tf["board_L"] = 60.0, 50.0
    hs["board_L_ci"], tf["board_L_ci"] = [57.0, 63.0], [47.0, 53.0]
    c = _claims_of(flipped)
    assert c["hyperset_beats_transformer_at_L"] and not c["ci_overlap_at_L"]
    flipped["claims"] = c
    page = render(flipped, hs["L"])
    assert "54.70" in page and "49.30" in page  # the paper's numbers beside ours
    line = next(x for x in page.splitlines() if x.startswith("| Hyper-SET beats the looped transformer"))
    assert "**HOLDS**" in line and "60.00 vs 50.00" in line
    assert "**DOES NOT HOLD**" in render(res, res["models"]["Hyper-SET"]["L"])


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
