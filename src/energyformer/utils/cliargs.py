"""``argparse`` types for numeric options, checked at parse time (issue 25 class 2).

A value out of range is refused with the option's usage line and ``invalid ... value`` naming it,
never silently ignored (``--dim 0`` used to mean "the config's width"; ``--test-boards -1`` scored
all boards but the last; ``--jobs -3`` ran one job).
"""

from __future__ import annotations

import argparse
import math

from .fields import SEED_MAX


def int_at_least(low: int, high: int | None = None):
    """An integer >= ``low`` (and <= ``high`` when given) (``count = int_at_least(1)``)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            allowed = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"{value} must be an integer {allowed}")
        return value

    convert.__name__ = f"integer >= {low}" if high is None else f"integer in {low}..{high}"
    return convert


def positive_float(text: str) -> float:
    """A finite number > 0 (learning rates, deadlines)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


positive_float.__name__ = "number > 0"
#: integers >= 1 (counts: steps, jobs, threads, sizes), >= 0, and seeds (0..SEED_MAX, as a config's)
count = int_at_least(1)
nonneg_int = int_at_least(0)
seed = int_at_least(0, SEED_MAX)
