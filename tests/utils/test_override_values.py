"""``override_mapping``: integer-valued numbers become ints, and a value is not silently turned into a section.

``--set steps=1e3`` must give the int 1000 (the ``int_float`` docstring promises it; a float would
reach fields typed ``int | float`` or ``Any`` as 1000.0). ``a.b=1`` where ``a`` holds a plain value is a
typo or a wrong path: it must be a one-line error, not replace the value with ``{'b': 1}``.
"""

from __future__ import annotations

import pytest

from energyformer.utils.overrides import override_mapping
from energyformer.utils.validate import ConfigError


def test_integer_valued_float_override_is_an_int():
    """``steps=1e3`` -> an int equal to 1000 (not the float 1000.0)."""
    v = override_mapping({}, ["steps=1e3"])["steps"]
    assert isinstance(v, int) and not isinstance(v, float) and v == 1000


def test_a_key_below_a_plain_value_is_refused():
    """``a`` holds 3: ``a.b=1`` raises naming ``a.b``, the data is not rewritten."""
    with pytest.raises(ConfigError, match="'a' is a value, not a section"):
        override_mapping({"a": 3}, ["a.b=1"])
