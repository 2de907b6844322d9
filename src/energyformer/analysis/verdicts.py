"""Claim verdicts by declared rules (issue 22): HOLDS / DOES NOT HOLD / UNDECIDED / UNTESTABLE.

A claim compares a metric of model A with model B (or with a number) over seeds. The margin is
taken in the claim's favour (positive supports it) and compared with a **noise band**: the larger
of the seeds' spread (max - min within A and within B) and a declared ``noise``. A single seed on
either side (the fewer seeds decide) has no spread of its own: it decides only against a declared ``noise``
(the band is then that noise, or the other side's spread if larger) or, without one, when the margin exceeds a
declared ``single_seed_bound`` (and the other side's spread); with neither the claim is UNDECIDED. Results at the
floor or at chance on both sides say nothing about the claim: UNTESTABLE — against a fixed number, A there
alone, unless that number is the level itself ("A beats chance": A at chance does not). So is a claim with
no runs or non-finite results. Boundaries are compared with a 1e-9 relative allowance for rounding.

Claim kinds (``claim``):

``better``     A beats B:                HOLDS  if margin >  band;  DOES NOT HOLD if margin < -band
``not_worse``  A >= B - tolerance:       HOLDS  if margin - band >= -tolerance;
                                         DOES NOT HOLD if margin + band < -tolerance
``equal``      |A - B| <= tolerance:     HOLDS  if |margin| + band <= tolerance;
                                         DOES NOT HOLD if |margin| - band > tolerance
Anything between is UNDECIDED. The returned :class:`Outcome` carries the margin, the band and a
one-line reason, so a page can show why a verdict was reached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import fmean
from typing import Literal


class Verdict(str, Enum):
    HOLDS = "HOLDS"
    DOES_NOT_HOLD = "DOES NOT HOLD"
    UNDECIDED = "UNDECIDED"
    UNTESTABLE = "UNTESTABLE"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rules:
    """The declared rules of one claim (metric units throughout).

    noise:             a declared noise band (e.g. the seed spread measured elsewhere); None = only
                       the spread of these seeds.
    single_seed_bound: with one seed on a side and no declared ``noise``, the margin that decides; None (and no
                       ``noise``) = one seed never decides.
    chance:            the metric's value at chance (ln 9 for a 9-way loss, 1/9 for accuracy).
    floor:             the metric's floor (0 for a board accuracy nobody reaches).
    at_band:           how close to chance / floor counts as "at" it.
    """

    noise: float | None = None
    single_seed_bound: float | None = None
    chance: float | None = None
    floor: float | None = None
    at_band: float = 0.0


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    margin: float | None  # in the claim's favour
    band: float | None    # noise band the margin was compared with
    reason: str


def _spread(xs: Sequence[float]) -> float:
    return max(xs) - min(xs) if len(xs) > 1 else 0.0


def _at(values: Sequence[float], level: float | None, band: float) -> bool:
    return level is not None and abs(fmean(values) - level) <= band


def compare(a: Sequence[float], b: Sequence[float] | float, *, higher_is_better: bool,
            rules: Rules = Rules(), claim: Literal["better", "not_worse", "equal"] = "better",
            tolerance: float = 0.0) -> Outcome:
    """The verdict of "A ``claim`` B" for per-seed metric values ``a`` and ``b`` (a number: a fixed
    reference such as the paper's value or chance)."""
    if claim not in ("better", "not_worse", "equal"):
        raise ValueError(f"claim = {claim!r}: allowed 'better', 'not_worse', 'equal'")
    if tolerance < 0:
        raise ValueError(f"tolerance = {tolerance}: must be >= 0")
    fixed = not isinstance(b, Sequence)
    bs = [float(b)] if fixed else [float(x) for x in b]
    av = [float(x) for x in a]
    if not av or not bs:
        return Outcome(Verdict.UNTESTABLE, None, None, "no runs on one side")
    if not all(math.isfinite(x) for x in av + bs):
        return Outcome(Verdict.UNTESTABLE, None, None, "a non-finite result (diverged run)")
    for name, level in (("chance", rules.chance), ("the floor", rules.floor)):
        # both arms at the level; against a fixed number A alone — unless that number is the level itself
        # ("A beats chance"), where A at chance is a result (it was UNTESTABLE, so such a claim could not fail)
        if _at(av, level, rules.at_band) and (_at(bs, level, rules.at_band) != fixed):
            return Outcome(Verdict.UNTESTABLE, None, None,
                           f"{'A' if fixed else 'both'} at {name} ({level:g})")
    sign = 1.0 if higher_is_better else -1.0
    margin = sign * (fmean(av) - fmean(bs))
    # the fewer seeds decide: one seed of A against several of B has no spread of its own (B's spread alone,
    # 0 for equal values, let a 1e-5 margin HOLD)
    seeds = len(av) if fixed else min(len(av), len(bs))
    spread = max(_spread(av), 0.0 if fixed else _spread(bs))
    if seeds < 2 and rules.noise is None:
        if rules.single_seed_bound is None:
            return Outcome(Verdict.UNDECIDED, margin, None, "one seed and no declared bound")
        band = max(rules.single_seed_bound, spread)
        how = f"one seed: decided only beyond {band:g}"
    else:
        band = max(spread, rules.noise or 0.0)
        how = (f"seed spread {spread:g}" if band == spread else f"declared noise {band:g}")
    # boundaries compared with a rounding allowance: 0.7 vs 0.8 at tolerance 0.1 is "not worse by more than 0.1"
    # (its margin computes as -0.10000000000000009)
    eps = 1e-9 * max([1.0, tolerance, *map(abs, av), *map(abs, bs)])
    if claim == "better":
        holds, fails = margin > band + eps, margin < -band - eps
    elif claim == "not_worse":
        holds, fails = margin - band >= -tolerance - eps, margin + band < -tolerance - eps
    else:
        holds, fails = abs(margin) + band <= tolerance + eps, abs(margin) - band > tolerance + eps
    verdict = Verdict.HOLDS if holds else Verdict.DOES_NOT_HOLD if fails else Verdict.UNDECIDED
    tol = f", tolerance {tolerance:g}" if claim != "better" else ""
    return Outcome(verdict, margin, band, f"margin {margin:+.4g} vs band {band:.4g} ({how}{tol})")
