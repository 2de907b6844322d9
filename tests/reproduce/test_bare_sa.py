"""reproduce bare-sa: the report from a results dict, the committed page re-rendered byte for byte, and the
tiny pipeline writes the report and its figures (the claim rules: tests/analysis/test_bare_sa_claims.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from energyformer.analysis.bare_sa_report import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from bare_sa_results import bare_sa_results  # noqa: E402


def _results() -> dict:
    return bare_sa_results()


def test_report_states_scale_data_and_the_benchmark(tmp_path):
    r = _results() | {"scale": "short"}
    (tmp_path / "benchmark.md").write_text("| model | ratio to bare SA |\n|---|---|\n| recycled x3 | 7.50 |")
    text = write_report(tmp_path, r)
    assert "| HOLDS (margin" in text and (tmp_path / "README.md").exists()
    assert "23,040 training, 2,560 validation and 3,200 test" in text and "2000 optimiser steps" in text
    assert "sweep runs 400 steps" in text and "| recycled x3 | 7.50 |" in text


def test_report_only_rerenders_the_committed_page(tmp_path):
    """The page contract: --report-only --out DIR rebuilds README.md from DIR's results.json + benchmark.md."""
    import shutil
    from pathlib import Path

    from energyformer.reproduce.bare_sa import main

    page = Path(__file__).resolve().parents[2] / "docs" / "results" / "bare_sa"
    for f in ("results.json", "benchmark.md"):
        shutil.copy(page / f, tmp_path / f)
    assert main(["--report-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text() == (page / "README.md").read_text()


@pytest.mark.slow
def test_tiny_reproduction_writes_report(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    from energyformer.reproduce.bare_sa import main

    assert main(["--scale", "tiny", "--out", str(tmp_path / "out"), "--stages", "potts,images"]) == 0
    out = tmp_path / "out"
    text = (out / "README.md").read_text()
    assert "HOLD" in text and "Bayes-optimal" in text
    for png in ("potts_q_sweep.png", "potts_time.png", "potts_J.png", "digits_overlap.png", "digits_J.png"):
        assert (out / png).stat().st_size > 1000


def test_blew_up_flags_a_finite_but_exploding_training_objective():
    from energyformer.reproduce.bare_sa import blew_up

    # the factored J (Eq. 19) under SGD lr 300: finite losses, so the Trainer never stopped it
    assert "2.3 -> 1e+15" in blew_up([2.3] * 10 + [4.0, 1e5] * 20 + [1e15] * 10)
    assert blew_up([2.3] * 10 + [float("inf")]) is not None
    assert blew_up([2.30 - 0.001 * k for k in range(300)]) is None      # codebook objective going down
    assert blew_up([-2.9 - 0.1 * k for k in range(300)]) is None        # plain objective: unbounded below
    assert blew_up([0.0, 0.3, -0.2, 0.5] * 50) is None                  # contrastive divergence noise
    assert blew_up([]) is None


def test_blown_up_variant_shows_no_own_conditional_ce_but_a_note(tmp_path):
    r = _results() | {"scale": "short"}
    ok = {"val_loss": 2.10, "val_accuracy": 0.27, "cond_loss": 2.0887, "train_s": 6.5, "bayes_loss": 1.85,
          "train_loss_start": 2.30, "train_loss": 2.09, "blew_up": None}
    r["sweep"]["bare_variants"] = [
        ok | {"tag": "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 300", "cond_loss": 1.7419889136369664e+16,
              "train_loss": 1.3e27, "blew_up": "training objective 2.3 -> 1.332e+27", "rerun": "alone"},
        ok | {"tag": "J = sum of 4 heads K^T Q (Eq. 19), SGD lr 100"},
        {"tag": "legacy row without training-loss records", "val_loss": 2.2, "val_accuracy": 0.2, "cond_loss": 2.3,
         "train_s": 1.0, "bayes_loss": 1.85},
        {"tag": "diverged", "val_loss": float("inf"), "val_accuracy": float("nan"), "train_s": float("nan"),
         "cond_loss": None, "bayes_loss": None, "diverged": "training diverged at step 3"},
    ]
    text = write_report(tmp_path, r)
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| J = sum") or line.startswith("| legacy") or line.startswith("| diverged")}
    assert rows["J = sum of 4 heads K^T Q (Eq. 19), SGD lr 300"][3] == "—"
    assert "blew up: training objective 2.3 -> 1.332e+27" in rows["J = sum of 4 heads K^T Q (Eq. 19), SGD lr 300"][5]
    assert rows["J = sum of 4 heads K^T Q (Eq. 19), SGD lr 100"][3] == "2.089"
    assert rows["legacy row without training-loss records"][3] == "2.3"
    assert rows["diverged"][3] == "—" and "diverged" in rows["diverged"][5]
    assert "only reports the blown-up scale" in text and "*rerun*" in text
    assert "| 1.742e+16 |" not in text
