"""The bare SA page's claims by declared rules: every verdict each rule can reach, on a synthetic results
dict (tests/fixtures/bare_sa_results.py) edited per case."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from energyformer.analysis.bare_sa_claims import benchmark_steps, ce_noise, claim_rows, step_cost_note, timing_noise

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from bare_sa_results import bare_sa_results  # noqa: E402

BENCH = """## one training step at the Potts MLM scale (B = 256, L = 20, C = 10; 5 interleaved repeats)

| model | median ms [min, max] | ratio to bare SA |
|---|---|---|
| bare SA | 40.00 [30.00, 60.00] | 1.00 |
| recycled x1 | 80.00 [70.00, 90.00] | 2.00 |

(after the table)
"""


def _v(r: dict, start: str, bench: str = BENCH) -> str:
    return next(row[1] for row in claim_rows(r, bench) if row[0].startswith(start)).split(" (")[0]


def test_noise_and_benchmark_parsing():
    r = bare_sa_results()
    noise, src = ce_noise(r["potts"])
    assert noise == 0.02 and "bare SA - recycled x3" in src
    assert benchmark_steps(BENCH) == {"bare SA": (40.0, 30.0, 60.0), "recycled x1": (80.0, 70.0, 90.0)}
    assert math.isclose(timing_noise(benchmark_steps(BENCH))[0], math.log(2.0))
    assert timing_noise({}) is None


@pytest.mark.parametrize("pairs, verdict", [(((-0.001, 0.002), (-0.002, 0.002)), "HOLDS"),
                                            (((0.05, 0.002), (-0.002, 0.002)), "DOES NOT HOLD"),
                                            (((0.008, 0.002), (-0.002, 0.002)), "UNDECIDED")])
def test_recycled_matches_layers(pairs, verdict):
    r = bare_sa_results()
    r["potts"]["paired"]["recycled x3 - 3 layers"], r["potts"]["paired"]["recycled x3 - factored"] = pairs
    assert _v(r, "One recycled layer x3 matches") == verdict


def _q(r: dict, model: str, key: str, values: list[float]) -> None:
    r["potts"]["models"][model]["test"].update({f"{key}{q}": v for q, v in zip(r["potts"]["qs"], values)})


@pytest.mark.parametrize("rec, bare, verdict", [
    ([2.0, 1.87, 1.86, 1.87, 1.95, 2.1], [2.04, 2.06, 2.08, 2.1, 2.12, 2.13], "DOES NOT HOLD"),  # dynamics only hurt
    ([2.0, 1.87, 1.86, 1.87, 1.95, 2.1], [2.20, 2.10, 2.08, 2.1, 2.12, 2.13], "HOLDS"),          # bare SA gains too
    ([1.87, 1.865, 1.86, 1.87, 1.95, 2.1], [2.04, 2.06, 2.08, 2.1, 2.12, 2.13], "UNDECIDED"),    # gain inside noise
    ([1.80, 1.87, 1.86, 1.87, 1.95, 2.1], [2.04, 2.06, 2.08, 2.1, 2.12, 2.13], "UNTESTABLE"),   # q = 1 best
])
def test_works_like_recycled_can_fail(rec, bare, verdict):
    r = bare_sa_results()
    _q(r, "recycled x3", "loss_q", rec)
    _q(r, "bare SA", "loss_cal_q", bare)
    assert _v(r, "Bare SA works qualitatively") == verdict


@pytest.mark.parametrize("t_rec, bench, verdict", [(180.0, BENCH, "HOLDS"), (100.0, BENCH, "UNDECIDED"),
                                                   (20.0, BENCH, "DOES NOT HOLD"), (180.0, "", "UNDECIDED")])
def test_fast_training_against_the_timing_bound(t_rec, bench, verdict):
    r = bare_sa_results()   # bare SA reaches its final loss 2.05 at 90 s
    r["potts"]["models"]["recycled x3"]["curve"] = [[100, 10.0, 2.2], [300, t_rec, 2.0]]
    assert _v(r, "Training by pseudo-likelihood is fast", bench) == verdict


@pytest.mark.parametrize("pair, verdict", [((0.18, 0.01), "HOLDS"), ((0.005, 0.01), "UNDECIDED"),
                                           ((-0.1, 0.01), "DOES NOT HOLD")])
def test_worse_test_performance(pair, verdict):
    r = bare_sa_results()
    r["potts"]["paired"]["bare SA - recycled x3"] = pair
    assert _v(r, "Con: worse test performance") == verdict


@pytest.mark.parametrize("x3, x1, verdict", [([1.86, 1.861, 1.86, 1.862], [1.87, 1.95], "HOLDS"),
                                             ([1.86, 1.9, 1.86, 1.95], [1.87, 1.95], "DOES NOT HOLD"),
                                             ([1.86, 1.87, 1.86, 1.86], [1.87, 1.95], "UNDECIDED"),
                                             ([1.86, 1.861, 1.86, 1.862], [1.87, 1.875], "UNDECIDED")])
def test_q_sampling(x3, x1, verdict):
    r = bare_sa_results()
    r["potts"]["paired"]["bare SA - recycled x3"] = (0.18, 0.002)   # page noise 2 x 0.005 = 0.01 < Q_TOL
    t3, t1 = r["potts"]["models"]["recycled x3"]["test"], r["potts"]["models"]["recycled x1"]["test"]
    t3.update({"loss_q1": 2.0, "loss_q2": x3[1], "loss_q3": x3[0], "loss_q4": x3[3], "loss_q6": 1.95, "loss_q8": 2.1})
    t1.update({"loss_q1": x1[0], "loss_q2": x1[1]})
    assert _v(r, "Recycling: sampling q_train") == verdict


def test_sensitivity_and_threshold_claims_flip():
    r = bare_sa_results()
    assert _v(r, "Con: sensitive to hyper-parameters") == "HOLDS"   # 0.25 vs 0.03
    for g, v in zip(r["sweep"]["bare_grid"], (2.06, 2.05, 2.06)):
        g["val_loss"] = v
    assert _v(r, "Con: sensitive to hyper-parameters") == "UNDECIDED"    # 0.01 vs 0.03, band 0.04
    r["sweep"]["recycled_lr"][0]["val_loss"] = 2.1
    assert _v(r, "Con: sensitive to hyper-parameters") == "DOES NOT HOLD"
    r["potts"]["recovery_bare"]["corr"] = 0.1
    r["memory"]["CIFAR p=4: bare SA (N=64, d=96)"]["step_peak_bytes"] = 1
    r["images"]["digits"]["curves"]["test, noise 0.3"]["overlap"] = [0.75, 0.76, 0.77, 0.78]
    for start in ("Pro: more explainable", "Con: high memory", "Transient memories"):
        assert _v(r, start) == "DOES NOT HOLD", start


def test_step_cost_note_says_what_the_timings_show():
    r = bare_sa_results()   # training runs: bare SA 45 ms/step, recycled x1 100 ms/step
    r["potts"]["models"]["bare SA"]["train_s"] = 400.0   # now 200 ms/step: slower than recycled x1
    note = step_cost_note(r, BENCH)
    assert "bare SA 2.00x *slower*" in note and "2.0-2.0x bare SA's step there" in note
