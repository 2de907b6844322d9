"""intrinsic_report at edges test_intrinsic_report.py leaves open."""

from energyformer.analysis.intrinsic_report import scale_verdict, steps_to_reach


def test_a_spread_of_exactly_twice_the_noise_cannot_tell_the_variants_apart():
    """scale_verdict: "Spread <= 2 x noise ... means the run cannot tell the variants apart" (binary-exact numbers:
    spread 0.5, largest seed range 0.25)."""
    text = scale_verdict({"a": [1.0, 1.25], "b": [1.625, 1.625]})
    assert "within twice the seed noise" in text and "cannot tell" in text


def test_a_loss_equal_to_the_target_at_the_last_evaluation_reaches_it():
    """steps_to_reach: "First (interpolated) step at which the validation loss is <= target": a run whose last
    evaluation equals the target (MHA against its own final loss with one seed) reached it there, not "not reached"."""
    assert steps_to_reach([(100, 3.0), (200, 2.0)], 2.0) == 200.0
    assert steps_to_reach([(100, 2.0)], 2.0) == 100.0
