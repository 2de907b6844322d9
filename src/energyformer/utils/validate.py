"""Value checks whose errors name the option, the value and what is allowed.

Every config dataclass calls these from ``__post_init__`` so that a bad value fails at
construction with one readable line, e.g.::

    ValueError: cem_attention.diagonal = 'diag': allowed values are 'none', 'shared', 'per_head'
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any


from energyformer.errors import ConfigError, DataError  # noqa: F401  (re-exported)


def closest(name: str, options: Iterable[str]) -> str | None:
    """The option closest to ``name`` (for 'did you mean' hints), or None."""
    hits = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return hits[0] if hits else None


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise ConfigError unless ``value`` is one of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        hint = ""
        if isinstance(value, str):
            near = closest(value, [a for a in allowed if isinstance(a, str)])
            if near is not None:
                hint = f" (did you mean {near!r}?)"
        raise ConfigError(
            f"{name} = {value!r}: allowed values are {', '.join(repr(a) for a in allowed)}{hint}"
        )


def check_int(name: str, value: Any, *, min: int | None = None, max: int | None = None) -> None:
    """Raise ConfigError unless ``value`` is an int in [min, max]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} = {value!r}: must be an integer")
    _check_bounds(name, value, min, max, "an integer")


def check_float(
    name: str, value: Any, *, min: float | None = None, max: float | None = None,
    min_exclusive: bool = False,
) -> None:
    """Raise ConfigError unless ``value`` is a finite real number in the given range (NaN passed a bound of one side
    and an infinite step size was taken: probe AS; configs refuse both already)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} = {value!r}: must be a number")
    if not math.isfinite(value):
        raise ConfigError(f"{name} = {value!r}: must be a finite number")
    if min is not None and min_exclusive and not value > min:
        raise ConfigError(f"{name} = {value!r}: must be > {min}")
    _check_bounds(name, value, None if min_exclusive else min, max, "a number")


def _check_bounds(name: str, value: Any, lo: Any, hi: Any, what: str) -> None:
    if lo is not None and hi is not None and not (lo <= value <= hi):
        raise ConfigError(f"{name} = {value!r}: must be {what} in [{lo}, {hi}]")
    if lo is not None and value < lo:
        raise ConfigError(f"{name} = {value!r}: must be {what} >= {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name} = {value!r}: must be {what} <= {hi}")


def check_divides(name: str, value: int, whole: int, what: str, *, listed_up_to: int = 10**6) -> None:
    """Raise ``ValueError`` unless ``value`` divides ``whole``; the message lists the allowed values
    (the divisors of ``whole``, found in O(√whole)) when ``whole`` ≤ ``listed_up_to``, so a hostile huge
    ``whole`` gives an error at once instead of a long search."""
    if whole % value == 0:
        return
    if whole <= listed_up_to:
        small = [d for d in range(1, math.isqrt(whole) + 1) if whole % d == 0]
        allowed = sorted(set(small) | {whole // d for d in small})
        hint = f"allowed: {', '.join(map(str, allowed))}"
    else:
        hint = f"allowed: the divisors of {whole}"
    raise ValueError(f"{name} = {value}: must divide {what} {whole} ({hint})")
