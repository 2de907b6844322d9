"""Edges of ``check_int`` / ``check_float``: inclusive bounds, bools, exclusive minima.

``check_int`` promises an int in ``[min, max]`` (both ends allowed) and refuses bools (``True`` is an
``int`` to Python, so a stray ``True`` would otherwise pass as 1); ``min_exclusive``
refuses the minimum itself (a learning rate of 0). Values inside the range never exercise these edges.
"""

from __future__ import annotations

import pytest

from energyformer.utils.validate import ConfigError, check_float, check_int


def test_check_int_bounds_are_inclusive():
    """Both ends of ``[min, max]`` pass; one past either end is refused."""
    check_int("n", 5, min=1, max=5)
    check_int("n", 1, min=1, max=5)
    for bad in (0, 6):
        with pytest.raises(ConfigError, match=r"in \[1, 5\]"):
            check_int("n", bad, min=1, max=5)


def test_check_int_refuses_bools():
    """``True`` / ``False`` are not integers here, even though ``bool`` subclasses ``int``."""
    for b in (True, False):
        with pytest.raises(ConfigError, match="must be an integer"):
            check_int("n", b, min=0)


def test_check_float_exclusive_minimum_refuses_the_minimum():
    """``min_exclusive``: the minimum itself is refused, anything above passes."""
    with pytest.raises(ConfigError, match="must be > 0"):
        check_float("lr", 0.0, min=0, min_exclusive=True)
    check_float("lr", 1e-12, min=0, min_exclusive=True)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("bounds", [{}, dict(min=0.0), dict(min=0.0, min_exclusive=True), dict(max=1.0)],
                         ids=["none", "min", "exclusive-min", "max"])
def test_check_float_refuses_values_that_are_not_finite(value, bounds):
    """Probe AS: NaN passed a one-sided bound and ``GradientDescent(step_size=inf)`` was accepted."""
    with pytest.raises(ConfigError, match=f"^x = {value!r}: must be a finite number$"):
        check_float("x", value, **bounds)
    from energyformer.core import GradientDescent

    with pytest.raises(ConfigError, match="step_size = inf: must be a finite number"):
        GradientDescent(step_size=float("inf"))
