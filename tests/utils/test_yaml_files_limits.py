"""Limits of the YAML config reader: the 2^53 bound of ``int_float`` and the ``base:`` chain depth.

``int_float`` turns integer-valued floats into ints only below 2^53, where a float still holds every
integer exactly (``1e20`` as an int would claim 21 exact digits a float never had). ``read_yaml`` follows
at most ``MAX_BASE_DEPTH`` ``base:`` links, a one-line error beyond. Ordinary configs never reach either.
"""

from __future__ import annotations

import pytest

from energyformer.utils.validate import ConfigError
from energyformer.utils.yaml_files import MAX_BASE_DEPTH, int_float, read_yaml


def test_int_float_converts_only_below_2_53():
    """``1e3`` -> 1000 (an int); ``2.0**53`` and ``1e20`` stay floats."""
    assert int_float(1e3) == 1000 and isinstance(int_float(1e3), int)
    for big in (2.0**53, 1e20, -1e20):
        assert isinstance(int_float(big), float)


def _chain(folder, links):
    folder.mkdir()
    tmp_path = folder
    for i in range(links):
        (tmp_path / f"c{i}.yaml").write_text(f"base: c{i + 1}.yaml\nk{i}: {i}\n")
    (tmp_path / f"c{links}.yaml").write_text("root: 1\n")
    return tmp_path / "c0.yaml"


def test_base_chain_depth_limit(tmp_path):
    """``MAX_BASE_DEPTH`` links are followed; one more is refused, naming the limit."""
    ok = read_yaml(_chain(tmp_path / "a", MAX_BASE_DEPTH))
    assert ok["root"] == 1 and ok["k0"] == 0
    with pytest.raises(ConfigError, match=f"more than {MAX_BASE_DEPTH} base: links"):
        read_yaml(_chain(tmp_path / "b", MAX_BASE_DEPTH + 1))
