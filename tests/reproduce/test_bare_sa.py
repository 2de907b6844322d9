"""reproduce bare-sa: the claim verdicts follow the measured numbers (they flip when the numbers do), and
the tiny pipeline writes the report and its figures."""

from __future__ import annotations

import copy

import pytest

from energyformer.analysis.bare_sa_report import claims, write_report


def _results() -> dict:
    qs = [1, 2, 3, 4, 6, 8]
    t = lambda loss, acc, **kw: {"loss": loss, "accuracy": acc, **kw}  # noqa: E731
    rec3 = t(1.86, 0.34, **{f"loss_q{q}": v for q, v in zip(qs, [2.0, 1.87, 1.86, 1.87, 1.95, 2.1])},
             **{f"accuracy_q{q}": 0.3 for q in qs})
    rec1 = t(1.87, 0.33, **{f"loss_q{q}": v for q, v in zip(qs, [1.87, 2.2, 2.4, 2.5, 2.6, 2.7])},
             **{f"accuracy_q{q}": 0.3 for q in qs})
    bare = t(2.10, 0.27, loss_cal=2.04, **{f"loss_cal_q{q}": v for q, v in zip(qs, [2.04, 2.06, 2.08, 2.1, 2.12, 2.13])},
             **{f"accuracy_q{q}": 0.27 for q in qs})
    curve = lambda pts: [[s, tt, v] for s, tt, v in pts]  # noqa: E731
    models = {
        "factored": {"test": t(1.862, 0.35), "curve": curve([(100, 1.0, 1.9)]), "steps": 2000, "train_s": 10.0, "params": 500},
        "bare SA": {"test": bare, "curve": curve([(100, 5.0, 2.1), (2000, 90.0, 2.05)]), "steps": 2000, "train_s": 90.0, "params": 40000},
        "recycled x1": {"test": rec1, "curve": curve([(100, 20.0, 2.2)]), "steps": 2000, "train_s": 200.0, "params": 55000},
        "recycled x3": {"test": rec3, "curve": curve([(100, 60.0, 2.2), (300, 180.0, 2.0)]), "steps": 2000,
                        "train_s": 600.0, "params": 55000},
        "3 layers": {"test": t(1.861, 0.34), "curve": curve([(100, 60.0, 2.1)]), "steps": 2000, "train_s": 600.0,
                     "params": 150000},
    }
    task = {"data": {"L": 20, "C": 10, "beta": 1.0, "coupling_seed": 0, "sample_seed": 0, "n_train": 25600,
                     "n_test": 3200}, "n_validation": 2560, "n_masked": 1, "batch_size": 256}
    for m in models.values():
        m["config"] = {"task": task, "train": {"seed": 0}}
    paired = {"recycled x3 - 3 layers": (-0.001, 0.002), "recycled x3 - factored": (-0.002, 0.002),
              "bare SA - recycled x3": (0.18, 0.01), "recycled x3 - recycled x1": (-0.01, 0.005),
              "factored - bayes": (0.02, 0.002)}
    mem = lambda b, n: {"params": n, "param_bytes": 4 * n, "step_peak_bytes": b}  # noqa: E731
    return {
        "potts": {"models": models, "paired": paired, "qs": qs, "marginal_loss": 2.28,
                  "bayes": {"bayes_loss": 1.84, "bayes_accuracy": 0.35, "bayes_loss_se": 0.005},
                  "recovery_bare": {"corr": 0.8, "u_share": 0.5, "symmetry": 0.9},
                  "recovery_factored": {"corr_A": 0.9, "corr_V": 0.9}},
        "sweep": {"bare_grid": [{"lam": 1.0, "lr": lr, "val_loss": v, "val_accuracy": 0.3, "cond_loss": 2.0}
                                for lr, v in ((100, 2.1), (300, 2.05), (1000, 2.3))],
                  "bare_variants": [], "recycled_lr": [{"lr": lr, "val_loss": v, "val_accuracy": 0.3, "train_s": 1.0}
                                                       for lr, v in ((5e-4, 1.9), (2e-3, 1.87), (8e-3, 1.88))]},
        "memory": {"Potts: bare SA (N=20, d=10)": mem(2**20, 40000), "Potts: recycled x3 (dim 64)": mem(2**25, 55000),
                   "CIFAR p=4: bare SA (N=64, d=96)": mem(2**30, 37748736),
                   "CIFAR p=4: recycled x3 (dim 96)": mem(2**26, 140000)},
        "images": {"digits": {"curves": {"test, noise 0.3": {"overlap": [0.75, 0.84, 0.8, 0.77],
                                                               "nearest": [0.7, 0.85, 0.86, 0.86],
                                                               "mse": [0.08, 0.04, 0.05, 0.06]}},
                              "train_s": 5.0, "params": 16384, "patch": 2, "n_tokens": 16, "dim": 8,
                              "n_train": 1293, "steps": 1000}},
    }


def _verdicts(r) -> dict[str, str]:
    return {c: v for c, v, _ in claims(r)}


def test_verdicts_follow_the_numbers(tmp_path):
    v = _verdicts(_results())
    assert set(v.values()) == {"HOLDS"}, v
    r = copy.deepcopy(_results())
    r["potts"]["paired"]["recycled x3 - 3 layers"] = (0.05, 0.002)          # no longer matches
    r["potts"]["paired"]["bare SA - recycled x3"] = (0.005, 0.01)           # not significantly worse
    r["potts"]["recovery_bare"]["corr"] = 0.1
    r["memory"]["CIFAR p=4: bare SA (N=64, d=96)"]["step_peak_bytes"] = 1
    r["images"]["digits"]["curves"]["test, noise 0.3"]["overlap"] = [0.75, 0.76, 0.77, 0.78]  # monotone
    for g, v in zip(r["sweep"]["bare_grid"], (2.06, 2.05, 2.06)):  # flatter than the transformer sweep
        g["val_loss"] = v
    r["potts"]["models"]["recycled x3"]["curve"] = [[100, 1.0, 2.0]]        # reaches the target first
    v = _verdicts(r)
    flipped = [c for c, x in v.items() if x == "DOES NOT HOLD"]
    assert len(flipped) == 7, v
    r = _results() | {"scale": "short"}
    (tmp_path / "benchmark.md").write_text("| model | ratio to bare SA |\n|---|---|\n| recycled x3 | 7.50 |")
    text = write_report(tmp_path, r)
    assert "| HOLDS |" in text and (tmp_path / "README.md").exists()
    assert "23,040 training, 2,560 validation and 3,200 test" in text and "2000 optimiser steps" in text
    assert "sweep runs 400 steps" in text and "| recycled x3 | 7.50 |" in text


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
