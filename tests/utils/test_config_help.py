"""``energyformer list keys`` (``config_fields``): every listed default is the value a config gets when the key is
not set. Before, a kind field whose default is a shorthand (ET's and ISTA's ``step_size: 0.1``) listed the kind's
class defaults (``value = 1.0``) under every model kind."""

import re

import pytest

from energyformer.blocks import ATTENTIONS, MLPS
from energyformer.utils.config import to_dict
from energyformer.utils.config_help import config_fields

_PART = re.compile(r"^([^\[]+)(?:\[kind=([^\]]+)\])?$")


def _walk(data, key: str):
    """The value at dotted ``key`` of the resolved ``data``, or a miss where a ``[kind=K]`` is not the kind chosen."""
    node = data
    for part in key.split("."):
        name, kind = _PART.match(part).groups()
        if not isinstance(node, dict) or name not in node:
            return "<miss>"
        node = node[name]
        if kind is not None and (not isinstance(node, dict) or node.get("kind") != kind):
            return "<miss>"
    return node


@pytest.mark.parametrize("entry", [pytest.param(e, id=f"{r.what}-{n}") for r in (ATTENTIONS, MLPS)
                                   for n, e in r.entries.items()])
def test_every_listed_default_is_the_resolved_default(entry):
    resolved = to_dict(entry.config())
    checked = 0
    for key, _, default, _ in config_fields(entry.config):
        value = _walk(resolved, key)
        if value == "<miss>" or default == "<required>":
            continue
        checked += 1
        assert to_dict(default) == value, f"{key}: listed {default!r}, resolves to {value!r}"
    assert checked


def test_et_step_size_is_listed_as_its_default():
    rows = {k: d for k, _, d, _ in config_fields(ATTENTIONS.get("et").config)}
    assert rows["step_size.kind"] == "fixed" and rows["step_size[kind=fixed].value"] == 0.1
