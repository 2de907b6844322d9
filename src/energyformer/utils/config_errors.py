"""pydantic error records reshaped for one-line config errors (used by ``utils.config.format_validation_error``).

A value that matches none of a union's forms comes back from pydantic as one record per form, each located
*inside* the form (``givens.int``, ``givens.tuple[int, int][1]``): the user saw the form's type name as if it
were a key ("givens.int = [30]: input should be a valid integer"). :func:`merge_union_errors` folds them into
one record at the value's own key that lists every form it failed. :func:`item_error` words an item missing
from a fixed-length list (``betas = [0.9]``) as too few items instead of a "missing required key betas[1]".
"""

from __future__ import annotations

import re
from typing import Any

#: a location part that names a union's form rather than a key: a builtin type name or a parametrised type
_FORM = re.compile(r"^(?:int|float|str|bool|bytes|none|list|tuple|dict|set|literal)(?:\[.*\])?$|.*\[.*\]$")


def _is_form(part: Any) -> bool:
    return isinstance(part, str) and bool(_FORM.match(part))


def _missing_item(err: dict) -> int | None:
    """The 1-based item a record says is missing from a fixed-length list (its location ends in an index)."""
    loc = err["loc"]
    return loc[-1] + 1 if err["type"] == "missing" and loc and isinstance(loc[-1], int) else None


_WRAPPED = re.compile(r"^function-(?:before|after|wrap|plain)\[[^,\[]*(?:\[[^\]]*\])?[^,]*, (.*)\]$")


def _form_label(part: str) -> str:
    """A union form's name as a user reads it: pydantic's validator wrappers peeled off
    (``function-before[dispatch(), KindConfig]`` is ``KindConfig``), and a config class as the section it is."""
    while (m := _WRAPPED.match(part)) is not None:
        part = m.group(1)
    return "a section {kind: ..., ...}" if re.fullmatch(r"[A-Z]\w*Config", part) else part


def _branch_text(err: dict, depth: int) -> str:
    if (item := _missing_item(err)) is not None and len(err["loc"]) > depth + 1:
        return f"too few items (no item {item})"
    msg = err["msg"].removeprefix("Value error, ")
    key = (err.get("ctx") or {}).get("key")
    if err["type"] == "unknown_key" and key:  # the key itself: 'unknown key for step size kind ...' named none
        msg = msg.replace("unknown key", f"unknown key {key!r}", 1)
    return msg[:1].lower() + msg[1:]


def merge_union_errors(items: list[dict]) -> list[dict]:
    """``items`` (pydantic's ``errors()``) with the records of the first value that failed a union merged into one
    (type ``union_none``, at the value's own location, its message naming each form and why it failed)."""
    if len(items) < 2:
        return items
    loc = list(items[0]["loc"])
    depth = next((i for i, part in enumerate(loc) if _is_form(part)), None)
    if depth is None:
        return items
    head = loc[:depth]
    same = [e for e in items if list(e["loc"][:depth]) == head and len(e["loc"]) > depth and _is_form(e["loc"][depth])]
    if len(same) < 2:
        return items
    forms = "; ".join(f"{_form_label(e['loc'][depth])}: {_branch_text(e, depth)}" for e in same)
    own = next((e for e in same if len(e["loc"]) == depth + 1), same[0])
    merged = {"type": "union_none", "loc": tuple(head), "input": own.get("input"), "ctx": {},
              "msg": f"matches none of the forms this key takes ({forms})"}
    rest = [e for e in items if e not in same]
    return [merged, *rest]


def item_error(err: dict) -> str | None:
    """The message of a record for an item missing from a fixed-length list (its location ends in an index), else
    None."""
    item = _missing_item(err)
    return None if item is None else f"too few items (no item {item}; give all of them, e.g. [a, b])"


__all__ = ["item_error", "merge_union_errors"]
