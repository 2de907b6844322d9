"""Verdict rules at their edges (verdicts.py docstring, issue 22) that the other verdict tests left open:
a declared noise decides one seed, the band is the *larger* of spread and noise, an ``equal`` claim fails only
beyond the band, and a non-finite B is UNTESTABLE like a non-finite A."""

import math

from energyformer.analysis.verdicts import Rules, Verdict, compare

H, N, U, T = Verdict.HOLDS, Verdict.DOES_NOT_HOLD, Verdict.UNDECIDED, Verdict.UNTESTABLE


def test_one_seed_decides_against_a_declared_noise_without_a_bound():
    """"A single seed ... decides only against a declared noise": one seed, noise 0.5, margin 10 -> HOLDS/NOT."""
    out = compare([70.0], [60.0], higher_is_better=True, rules=Rules(noise=0.5))
    assert out.verdict is H and out.band == 0.5
    assert compare([60.0], [70.0], higher_is_better=True, rules=Rules(noise=0.5)).verdict is N


def test_a_declared_noise_smaller_than_the_seed_spread_does_not_narrow_the_band():
    """band = max(seed spread, noise): spread 2 beats noise 0.5, so a margin of 1.5 stays UNDECIDED."""
    out = compare([70.0, 72.0], [69.0, 70.0], higher_is_better=True, rules=Rules(noise=0.5))
    assert out.verdict is U and out.band == 2.0


def test_an_equal_claim_fails_only_beyond_tolerance_plus_band():
    """``equal``: DOES NOT HOLD iff |margin| - band > tolerance. |margin| 0.15, band 0.1, tolerance 0.1: neither."""
    out = compare([1.1, 1.2], [1.0, 1.0], higher_is_better=True, claim="equal", tolerance=0.1)
    assert math.isclose(out.margin, 0.15) and math.isclose(out.band, 0.1)
    assert out.verdict is U
    assert compare([1.4, 1.5], [1.0, 1.0], higher_is_better=True, claim="equal", tolerance=0.1).verdict is N


def test_a_non_finite_b_is_untestable_not_undecided():
    """A diverged run on B's side (NaN / inf) says nothing: UNTESTABLE "non-finite", as for A."""
    for bad in (math.nan, math.inf):
        out = compare([70.0, 71.0], [60.0, bad], higher_is_better=True)
        assert out.verdict is T and "non-finite" in out.reason
