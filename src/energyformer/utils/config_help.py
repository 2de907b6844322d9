"""The settable keys of a config class, for ``energyformer list keys`` (split out of :mod:`energyformer.utils.config`).

:func:`config_fields` walks a config class (sub-configs expanded; a kind-selected field lists its registered
kinds and then every kind's keys as ``key[kind=NAME].sub``); :func:`format_config_help` prints them as an
aligned table of key, type, default and the first line of the field's docstring.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel

from energyformer.utils.config import _kind_marker, _KindMarker

__all__ = ["config_fields", "format_config_help"]


def _type_name(ann: Any) -> str:
    if ann is None or ann is type(None):
        return "None"
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        return _type_name(args[0])
    if str(origin) == "typing.Literal":
        return " | ".join(repr(a) for a in args)
    if origin is not None and args:
        name = getattr(origin, "__name__", "")
        if name in ("Union", "UnionType") or str(origin) in ("typing.Union",):
            return " | ".join(_type_name(a) for a in args)
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(ann, "__name__", str(ann)).replace("typing.", "")


def config_fields(cls: type[BaseModel], prefix: str = "", default: BaseModel | None = None
                  ) -> list[tuple[str, str, Any, str]]:
    """(dotted key, type, default, help) for every settable key of ``cls``, sub-configs expanded.

    A kind-selected field lists its ``kind`` (the registered names) and then the keys of every
    registered kind as ``key[kind=NAME].sub``.
    """
    out: list[tuple[str, str, Any, str]] = []
    for name, f in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        value = getattr(default, name) if default is not None else (
            f.get_default(call_default_factory=True) if not f.is_required() else "<required>")
        help_ = _first_paragraph(f.description)
        marker = _kind_marker(f.annotation) or next(
            (m for m in f.metadata if isinstance(m, _KindMarker)), None)
        if marker is not None:
            reg = marker.registry
            if value is not None and not isinstance(value, (BaseModel, str)):  # a shorthand default (step_size = 0.1)
                value = _validated_default(f)
            cur = getattr(value, "kind", marker.default)
            out.append((f"{key}.kind", " | ".join(repr(n) for n in reg.names()), cur,
                        help_ or f"{reg.what} kind"))
            for kname, entry in reg.entries.items():
                sub_default = value if getattr(value, "kind", None) == kname else None
                rows = config_fields(entry.config, f"{key}[kind={kname}]", sub_default)
                out += [r for r in rows if not r[0].endswith("].kind")]
            continue
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += config_fields(ann, key, value if isinstance(value, BaseModel) else None)
            continue
        out.append((key, _type_name(ann), value, help_))
    return out


def _validated_default(f: Any) -> Any:
    """The default of field ``f`` as validation makes it: a kind field's shorthand default (a bare number for a fixed
    step size) is turned into its config by the field's before-validator, which ``get_default`` skips — its keys
    listed the kind's class defaults instead (ET's and ISTA's ``value = 1.0`` where 0.1 applies)."""
    from pydantic import TypeAdapter

    return TypeAdapter(Annotated[(f.annotation, *f.metadata)]).validate_python(
        f.get_default(call_default_factory=True))


def _first_paragraph(text: str | None) -> str:
    """A field's help up to its first blank line, on one line (its first line alone cut sentences mid-way: 46 keys
    of ``list keys`` ended in a dangling clause)."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def format_config_help(cls: type[BaseModel]) -> str:
    """An aligned table of keys, types, defaults and help, for ``energyformer list keys``."""
    rows = config_fields(cls)
    doc = (cls.__doc__ or "").strip().splitlines()
    lines = [f"{cls.__name__}: {doc[0]}" if doc else cls.__name__,
             "keys (override with --set KEY=VALUE; KEY[kind=NAME] applies when that kind is chosen):"]
    if not rows:
        return lines[0]
    wk = min(max(len(r[0]) for r in rows), 60)
    wt = min(max(len(r[1]) for r in rows), 40)
    for key, tname, default, help_ in rows:
        d = default if isinstance(default, str) and default == "<required>" else _fmt_default(default)
        line = f"  {key:<{wk}}  {tname:<{wt}}  = {d}"
        lines.append(f"{line}  # {help_}" if help_ else line)
    return "\n".join(lines)


def _fmt_default(value: Any) -> str:
    if isinstance(value, BaseModel):
        return f"<{type(value).__name__}>"
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return repr(value)
