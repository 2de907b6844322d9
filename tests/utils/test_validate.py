"""utils.validate: check_divides lists the allowed values, and answers at once for hostile huge values."""

import time

import pytest

from energyformer.utils.validate import check_divides


def test_check_divides_lists_the_divisors():
    check_divides("p", 7, 28, "side")  # divides: no error
    with pytest.raises(ValueError, match=r"^p = 5: must divide the side 28 \(allowed: 1, 2, 4, 7, 14, 28\)$"):
        check_divides("p", 5, 28, "the side")
    with pytest.raises(ValueError, match=r"allowed: 1, 13, 169\)"):
        check_divides("p", 2, 169, "the side")  # a square: its root listed once


def test_check_divides_is_immediate_for_huge_values():
    t = time.perf_counter()
    with pytest.raises(ValueError, match="allowed: the divisors of 999999999999999999999"):
        check_divides("patch_size", 2, 999999999999999999999, "image_size =")
    assert time.perf_counter() - t < 0.5  # an O(n) search would take hours
