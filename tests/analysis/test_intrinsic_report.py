"""The intrinsic-lm page's numbers, and its study's declared claims decided by the numbers (either way)."""

import math

from energyformer.analysis.intrinsic_report import history_points, loss_at, scale_verdict, steps_to_reach
from energyformer.studies import load_study
from energyformer.studies.claims import evaluate

def _verdicts(offsets):
    """The study's claims on Shakespeare records whose curves are 5 + 3 exp(-s/30) + offset."""
    recs = {}
    for v, offs in offsets.items():
        for seed, o in enumerate(offs):
            hist = [(s, 5 + 3 * math.exp(-s / 30) + o) for s in range(10, 101, 10)]
            recs[f"{v}{seed}"] = {"cell": {"variant": v, "corpus": "shakespeare"}, "seed": seed,
                                  "metrics": {"val_loss": history_points(hist, 100)}}
    return {r.claim.id: str(r.outcome.verdict) for r in evaluate(load_study("intrinsic-lm"), recs)}


def test_claims_hold_when_the_numbers_say_so():
    v = _verdicts({"mha": [0.0, 0.02], "momen_mha": [-0.2, -0.18], "nag_mha": [-0.4, -0.38],
                   "mha2nd1st": [0.3, 0.32], "mha2nd1st_simple": [0.6, 0.62], "mha2nd_lite": [0.005, 0.015]})
    assert v == {"a-momen": "HOLDS", "a-nag": "HOLDS", "b": "HOLDS", "c": "HOLDS", "d": "HOLDS",
                 "e": "HOLDS"}  # e: lite - MHA +0.005 and -0.005 by seed, inside its 0.05 nats


def test_claims_fail_in_the_wrong_direction_and_are_undecided_within_seed_noise():
    v = _verdicts({"mha": [0.0, 0.02], "momen_mha": [0.2, 0.21], "nag_mha": [0.3, 0.31],
                   "mha2nd1st": [-0.3, -0.29], "mha2nd1st_simple": [-0.5, -0.49], "mha2nd_lite": [1.0, 1.01]})
    assert v == {"a-momen": "DOES NOT HOLD", "a-nag": "DOES NOT HOLD", "b": "DOES NOT HOLD",
                 "c": "DOES NOT HOLD", "d": "DOES NOT HOLD", "e": "DOES NOT HOLD"}
    noisy = _verdicts({"mha": [0.0, 0.3], "momen_mha": [-0.1, 0.2], "nag_mha": [-0.05, 0.25],
                       "mha2nd1st": [0.1, 0.4], "mha2nd1st_simple": [0.15, 0.45], "mha2nd_lite": [0.1, 0.2]})
    assert set(noisy.values()) == {"UNDECIDED"}  # e: paired differences +0.1, -0.1 straddle the 0.05 nats


def test_missing_variants_are_not_run():
    v = _verdicts({"mha": [0.0, 0.1]})
    assert v["e"] == "UNTESTABLE" and {v[k] for k in ("a-momen", "c")} == {"UNTESTABLE"}  # no runs on one side


def test_interpolation_helpers():
    h = [(10, 4.0), (20, 3.0), (30, 2.5)]
    assert loss_at(h, 15) == 3.5 and math.isnan(loss_at(h, 5))
    assert steps_to_reach(h, 3.5) == 15.0 and steps_to_reach(h, 2.0) == math.inf


def test_a_claim_on_a_single_seed_is_undecided():
    v = _verdicts({"mha": [0.0], "momen_mha": [-0.2], "nag_mha": [-0.4]})
    assert v["a-momen"] == v["a-nag"] == v["b"] == "UNDECIDED"


def test_scale_verdict_compares_the_spread_of_variants_with_seed_noise():
    """{variant: final loss per seed}: spread of the means against twice the largest seed range."""
    tight = scale_verdict({"mha": [5.0, 5.1], "momen_mha": [5.05, 5.12], "nag_mha": [5.02]})
    assert "span 0.065 nats (nag_mha 5.020 to momen_mha 5.085)" in tight
    assert "cannot tell the variants apart" in tight and "2 of 3 variants have ≥ 2 seeds" in tight
    assert "separates at least the extreme variants" in scale_verdict({"mha": [5.0, 5.01], "momen_mha": [5.5, 5.51]})
    assert "no noise estimate" in scale_verdict({"mha": [5.0], "momen_mha": [5.5]})
