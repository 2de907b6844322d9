"""Dotted ``--set a.b.c=value`` overrides applied to a config mapping, before validation
(:func:`energyformer.utils.config.load_config` and :func:`~energyformer.utils.config.apply_overrides` call
:func:`override_mapping`; split from :mod:`energyformer.utils.config`).

The rules: a value is parsed as YAML (``int_float``: ``1e-3`` is a float); the same key given twice: the last value
wins; an override that switches a section's kind (``a.kind=x``, ``a=x``, ``a={kind: x, ...}``) drops the keys of the
section's old kind, as ``base:`` does, and applies before the other overrides, outer sections first; setting a key
under a value (``train.steps.x=1``) is refused naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from energyformer.utils.validate import ConfigError
from energyformer.utils.yaml_files import int_float, merge_over, parse_value


def _split_override(item: str) -> tuple[list[str], str]:
    key, sep, raw = str(item).partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or not all(p.strip() for p in parts):
        raise ConfigError(f"override {item!r} must look like 'a.b.c=value'")
    return parts, raw.strip()


def _set_path(data: Any, parts: list[str], value: Any, done: str) -> dict:
    node = dict(data) if isinstance(data, Mapping) else ({"kind": data} if isinstance(data, str) else {})
    if data is not None and not isinstance(data, (Mapping, str)):
        raise ConfigError(f"unknown key {done + '.' + parts[0]!r}: {done!r} is a value, not a section")
    head, rest = parts[0], parts[1:]
    if not rest:
        if head == "kind" and node.get("kind", value) != value:
            return {"kind": value}  # another kind: the old kind's keys do not carry over (as under base:)
        # --set model.block={dropout: 0.1} merges; a mapping or bare name of another kind replaces
        node[head] = merge_over(node[head], value) if head in node else value
        return node
    node[head] = _set_path(node.get(head), rest, value, f"{done}.{head}" if done else head)
    return node


def override_mapping(data: Mapping | None, overrides: Sequence[str] | str) -> dict:
    """A new mapping: ``data`` with the dotted ``"a.b=value"`` overrides applied (values parsed as YAML).

    An override that picks another kind for a section (``train.schedule.kind=constant``,
    ``model.block.attention=llama`` or a mapping with another ``kind``) replaces the section as a config's
    ``base:`` does, so the keys of the old kind do not carry over; such switches apply before the other overrides,
    whatever their order. ``a[kind=x].k=1`` (``list keys`` notation) also sets ``a.kind=x``.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    out: dict = dict(data or {})
    items = []
    for item in overrides:
        key, value = _key_and_value(str(item))
        items += _kind_selectors(key)  # `list keys` notation: a[kind=x].k=1 also sets a.kind=x
        parts, raw = _split_override(_KIND_SELECTOR.sub("", key) + value)
        items.append((parts, int_float(parse_value(raw)) if raw else raw))
    # the same key given twice: the last value wins (the earlier one never applies, so it cannot outlive a later
    # string value that the ordering below would otherwise apply first)
    last = {tuple(parts): i for i, (parts, _) in enumerate(items)}
    items = [item for i, item in enumerate(items) if last[tuple(item[0])] == i]
    # kind switches first (a.kind=x, a=x, a={kind: x, ...}), outer sections before inner ones, so that
    # `a.k=1 a.kind=x` keeps a.k=1 as `a.kind=x a.k=1` does: a switch drops the keys of the section's old kind,
    # never an override's; the other overrides in the order given
    order = sorted(range(len(items)), key=lambda i: (0, _section_depth(items[i][0])) if _switches_kind(*items[i])
                   else (1, 0))
    for parts, value in (items[i] for i in order):
        out = _set_path(out, parts, value, "")
    return out


_KIND_SELECTOR = re.compile(r"\[kind=([^\]=]+)\]")


def _key_and_value(item: str) -> tuple[str, str]:
    """``item`` split before the first ``=`` outside a ``[kind=...]`` selector (the value keeps its ``=``)."""
    depth = 0
    for i, ch in enumerate(item):
        depth += (ch == "[") - (ch == "]")
        if ch == "=" and depth == 0:
            return item[:i], item[i:]
    return item, ""


def override_key(item: str) -> tuple[str, ...]:
    """The dotted key of an override ``KEY=VALUE`` (or a bare key) as its parts, ``[kind=...]`` selectors dropped:
    ``'train.schedule[kind=constant].warmup=0.1'`` -> ``('train', 'schedule', 'warmup')``."""
    return tuple(p.strip() for p in _KIND_SELECTOR.sub("", _key_and_value(item)[0]).split("."))


def _kind_selectors(key: str) -> list[tuple[list[str], str]]:
    """``model.block.attention[kind=mha].steps`` (a key as ``list keys`` prints it) -> the kind switches it
    implies: ``[(["model", "block", "attention", "kind"], "mha")]``."""
    out = []
    for m in _KIND_SELECTOR.finditer(key):
        head = _KIND_SELECTOR.sub("", key[:m.start()])
        out.append(([p.strip() for p in head.split(".")] + ["kind"], m.group(1).strip()))
    return out


def _section_depth(parts: list[str]) -> int:
    """how deep the section an override sets lies (``a.b.kind`` sets section a.b, as ``a.b=x`` does)"""
    return len(parts) - (parts[-1] == "kind")


def _switches_kind(parts: list[str], value: Any) -> bool:
    return parts[-1] == "kind" or isinstance(value, str) or (isinstance(value, Mapping) and "kind" in value)
