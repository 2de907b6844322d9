"""Issue 22: the verdict rules (UNDECIDED inside noise; UNTESTABLE at floor or chance; one seed)."""

import math

import pytest

from energyformer.analysis.verdicts import Rules, Verdict, compare

H, N, U, T = Verdict.HOLDS, Verdict.DOES_NOT_HOLD, Verdict.UNDECIDED, Verdict.UNTESTABLE


def test_outside_the_seed_spread_decides_both_ways():
    assert compare([70.0, 71.0], [60.0, 61.0], higher_is_better=True).verdict is H
    assert compare([60.0, 61.0], [70.0, 71.0], higher_is_better=True).verdict is N
    # lower is better (perplexity)
    assert compare([80.0, 81.0], [90.0, 91.0], higher_is_better=False).verdict is H


def test_inside_the_seed_spread_or_declared_noise_is_undecided():
    out = compare([70.0, 72.0], [69.0, 70.0], higher_is_better=True)  # margin 1.5, spread 2
    assert out.verdict is U and out.band == 2.0 and "seed spread" in out.reason
    assert compare([70.0, 70.5], [69.0, 69.5], higher_is_better=True, rules=Rules(noise=1.5)).verdict is U
    assert compare([70.0, 70.5], [69.0, 69.5], higher_is_better=True, rules=Rules(noise=0.5)).verdict is H


def test_one_seed_is_undecided_unless_the_margin_beats_the_stated_bound():
    assert compare([70.0], [60.0], higher_is_better=True).verdict is U
    assert compare([70.0], [60.0], higher_is_better=True, rules=Rules(single_seed_bound=5.0)).verdict is H
    assert compare([70.0], [67.0], higher_is_better=True, rules=Rules(single_seed_bound=5.0)).verdict is U
    assert compare([60.0], [70.0], higher_is_better=True, rules=Rules(single_seed_bound=5.0)).verdict is N


def test_floor_and_chance_are_untestable():
    assert compare([0.0, 0.0], [0.0, 0.0], higher_is_better=True, rules=Rules(floor=0.0)).verdict is T
    ln9 = math.log(9)
    out = compare([ln9, ln9 - 0.01], [ln9 + 0.005], higher_is_better=False, rules=Rules(chance=ln9, at_band=0.02))
    assert out.verdict is T and "chance" in out.reason
    # one side off the floor: testable
    assert compare([5.0, 6.0], [0.0, 0.0], higher_is_better=True, rules=Rules(floor=0.0)).verdict is H


def test_missing_or_diverged_runs_are_untestable():
    assert compare([], [1.0], higher_is_better=True).verdict is T
    assert compare([float("nan")], [1.0], higher_is_better=True).verdict is T


def test_not_worse_and_equal_claims():
    # 'A costs little': A within 5 of B
    assert compare([83.0, 84.0], [82.0, 83.0], higher_is_better=False, claim="not_worse", tolerance=5.0).verdict is H
    assert compare([95.0, 96.0], [82.0, 83.0], higher_is_better=False, claim="not_worse", tolerance=5.0).verdict is N
    assert compare([86.0, 89.0], [82.0, 83.0], higher_is_better=False, claim="not_worse", tolerance=5.0).verdict is U
    assert compare([1.00, 1.01], [1.005, 1.0], higher_is_better=True, claim="equal", tolerance=0.05).verdict is H
    assert compare([2.0, 2.01], [1.0, 1.01], higher_is_better=True, claim="equal", tolerance=0.05).verdict is N


def test_a_fixed_reference_number():
    assert compare([54.0, 55.0], 49.3, higher_is_better=True).verdict is H


def test_bad_arguments():
    with pytest.raises(ValueError, match="claim"):
        compare([1.0], [1.0], higher_is_better=True, claim="bigger")
    with pytest.raises(ValueError, match="tolerance"):
        compare([1.0], [1.0], higher_is_better=True, claim="equal", tolerance=-1)


def test_one_seed_on_either_side_needs_the_bound():
    """One seed of A against two equal seeds of B had band 0 (B's spread) and HELD on a 1e-5 margin."""
    assert compare([0.50001], [0.5, 0.5], higher_is_better=True).verdict is U
    assert compare([0.5, 0.5], [0.49999], higher_is_better=True).verdict is U
    assert compare([0.7], [0.5, 0.52], higher_is_better=True, rules=Rules(single_seed_bound=0.1)).verdict is H
    out = compare([0.55], [0.5, 0.52], higher_is_better=True, rules=Rules(single_seed_bound=0.1))
    assert out.verdict is U and out.band == 0.1


def test_a_claim_against_chance_itself_can_fail_at_chance():
    """b = the chance level: A at chance is DOES NOT HOLD (it was UNTESTABLE, so "A beats chance" could not fail);
    against another fixed number (the paper's), A at chance stays UNTESTABLE."""
    rules = Rules(chance=0.111, at_band=0.01)
    assert compare([0.11, 0.112], 0.111, higher_is_better=True, rules=rules).verdict is U  # inside the spread
    assert compare([0.10, 0.101], 0.111, higher_is_better=True, rules=rules).verdict is N
    out = compare([0.11, 0.11], 94.0, higher_is_better=True, rules=rules)
    assert out.verdict is T and out.reason == "A at chance (0.111)"
    assert compare([0.11, 0.11], [0.112, 0.11], higher_is_better=True, rules=rules).reason == "both at chance (0.111)"


@pytest.mark.parametrize("a, b, claim", [([0.7, 0.7], [0.8, 0.8], "not_worse"), ([0.2, 0.2], [0.3, 0.3], "not_worse"),
                                         ([0.8, 0.8], [0.7, 0.7], "equal")])
def test_a_margin_exactly_at_the_tolerance_holds_whatever_the_rounding(a, b, claim):
    """-0.1 computed as -0.10000000000000009 made 0.7 vs 0.8 "worse by more than 0.1" (0.2 vs 0.3 held)."""
    assert compare(a, b, higher_is_better=True, claim=claim, tolerance=0.1).verdict is H


def test_the_band_is_the_larger_seed_spread_of_either_side():
    """B's spread counts as much as A's (probe Z: a band of A's spread alone let 1.105 vs 1.0 ± 0.5 HOLD)."""
    out = compare([1.1, 1.11], [0.5, 1.5], higher_is_better=True)
    assert out.verdict == Verdict.UNDECIDED and out.band == pytest.approx(1.0)
    assert compare([1.5, 1.51], [0.99, 1.0], higher_is_better=True).verdict == Verdict.HOLDS


def test_one_seed_of_a_against_seeds_of_b_takes_b_spread_when_above_the_bound():
    """One seed of A: the band is the larger of the declared single-seed bound and B's spread (probe Z: the bound
    alone let 1.2 vs 1.0 ± 0.5 HOLD)."""
    rules = Rules(single_seed_bound=0.1)
    out = compare([1.2], [0.5, 1.5], higher_is_better=True, rules=rules)
    assert out.verdict == Verdict.UNDECIDED and out.band == pytest.approx(1.0)
    out = compare([1.2], [0.98, 1.02], higher_is_better=True, rules=rules)
    assert out.verdict == Verdict.HOLDS and out.band == pytest.approx(0.1)


def test_an_equal_claim_needs_margin_plus_band_within_the_tolerance():
    """'equal within t' HOLDS only when |margin| + band ≤ t (probe Z: |margin| ≤ t alone let a 0.2 spread HOLD at
    t 0.15)."""
    a, b = [1.0, 1.2], [1.1, 1.1]
    assert compare(a, b, higher_is_better=True, claim="equal", tolerance=0.15).verdict == Verdict.UNDECIDED
    assert compare(a, b, higher_is_better=True, claim="equal", tolerance=0.25).verdict == Verdict.HOLDS
    assert compare([1.0, 1.01], [1.5, 1.51], higher_is_better=True, claim="equal",
                   tolerance=0.25).verdict == Verdict.DOES_NOT_HOLD


def test_a_margin_equal_to_the_band_is_undecided_for_better():
    """"Better" needs a margin beyond the band: exactly at it (spread 2, margin 2) is inside the noise, UNDECIDED; a
    hair beyond is HOLDS. (An outside probe's mutant `margin >= band` survived.)"""
    assert compare([70.0, 72.0], [68.0, 70.0], higher_is_better=True).verdict is U
    assert compare([70.0, 72.0], [68.0, 69.99], higher_is_better=True).verdict is H
    assert compare([68.0, 70.0], [70.0, 72.0], higher_is_better=True).verdict is U
