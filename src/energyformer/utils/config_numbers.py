"""Booleans where a config takes numbers (:class:`~energyformer.utils.config.ConfigModel`'s before-check).

Pydantic's lax mode reads ``True`` as 1 (and 1.0), so YAML's ``yes`` / ``on`` / ``true`` in an integer or float field
would load as a number. :func:`bool_for_number` finds a boolean in a field's raw value where the field's annotation
allows numbers but no boolean — unions flattened, ``Annotated`` stripped, ``Literal`` options read, list / tuple items
and mapping values searched — and says what the field allows, for a one-line error naming the boolean's own place.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from collections.abc import Set as AbstractSet
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BeforeValidator, PlainValidator, WrapValidator


#: validators that see a field's raw input themselves (they may give a boolean a meaning, or refuse it in their words)
OWN_INPUT = (BeforeValidator, WrapValidator, PlainValidator)


def _scalars(annotation: Any) -> list[Any] | None:
    """The alternatives of ``annotation`` (unions flattened, ``Annotated`` stripped); None when one of them has
    a validator of its own that sees the raw input (:data:`OWN_INPUT`)."""
    if get_origin(annotation) is Annotated:
        inner, *meta = get_args(annotation)
        return None if any(isinstance(m, OWN_INPUT) for m in meta) else _scalars(inner)
    if get_origin(annotation) in (Union, types.UnionType):
        out: list[Any] = []
        for a in get_args(annotation):
            part = _scalars(a)
            if part is None:
                return None
            out += part
        return out
    return [annotation]


def _number_expected(annotation: Any) -> str | None:
    """What ``annotation`` allows, in words ('an integer', 'a number or one of 'head_dim''), when it takes
    numbers but no boolean; None when it takes a boolean (``bool``, ``Any``, ``Literal[True]``, a validator of its
    own) or no number at all (then pydantic's own error names what it wants)."""
    members = _scalars(annotation)
    if members is None:
        return None
    kinds: set[str] = set()
    options: list[Any] = []
    for m in members:
        if m is Any or m is object or isinstance(m, TypeVar):
            return None
        if get_origin(m) is Literal:
            if any(isinstance(v, bool) for v in get_args(m)):
                return None
            options += get_args(m)
        elif isinstance(m, type) and get_origin(m) is None:
            if issubclass(m, bool):
                return None
            if issubclass(m, float):
                kinds.add("a number")
            elif issubclass(m, int):
                kinds.add("an integer")
    if not kinds and not any(isinstance(v, (int, float)) for v in options):
        return None
    what = [("a number" if "a number" in kinds else "an integer")] if kinds else []
    if options:
        what.append("one of " + ", ".join(repr(v) for v in options))
    return " or ".join(what)


_SEQUENCES = (list, tuple, set, frozenset, Sequence, MutableSequence, AbstractSet)
_MAPPINGS = (dict, Mapping, MutableMapping)


def bool_for_number(annotation: Any, value: Any, at: tuple = ()) -> tuple[tuple, bool, str] | None:
    """The first boolean in ``value`` where ``annotation`` allows numbers only, as (its place below the
    field, the boolean, what is allowed there); list / tuple items and mapping values are searched too."""
    if isinstance(value, bool):
        what = _number_expected(annotation)
        return None if what is None else (at, value, what)
    if not isinstance(value, (list, tuple, Mapping)):
        return None
    members = _scalars(annotation)
    hits = []
    for m in members or ():
        origin, args = get_origin(m), get_args(m)
        if isinstance(value, Mapping) and origin in _MAPPINGS and len(args) == 2:
            places = [(args[1], v, k) for k, v in value.items()]
        elif not isinstance(value, Mapping) and origin in _SEQUENCES and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                if len(args) != len(value):
                    continue  # pydantic names the length
                places = [(t, v, i) for i, (t, v) in enumerate(zip(args, value))]
            else:
                places = [(args[0], v, i) for i, v in enumerate(value)]
        else:
            continue
        hit = next((h for t, v, k in places if (h := bool_for_number(t, v, at + (k,))) is not None), None)
        if hit is None:
            return None  # this alternative takes the value as it is
        hits.append(hit)
    return hits[0] if hits else None
