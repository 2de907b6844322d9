"""Nested dataclass configs from YAML, with strict keys and dotted command-line overrides.

A config is a tree of ``@dataclass`` es with defaults. Values are checked against the field
annotations, unknown keys are errors with a "did you mean" hint, and each dataclass's own
``__post_init__`` validation runs on the final values (after overrides)::

    @dataclass
    class CEM:
        steps: int = 3
        lr: float = 0.1

    @dataclass
    class Model:
        cem: CEM = field(default_factory=CEM)
        kind: Literal["causal", "bidir"] = "causal"

    cfg = load_config(Model, "run.yaml", ["cem.steps=2", "cem.lr=3e-4"])
    cfg.cem.steps                               # 2
    load_config(Model, {"cem": {"stpes": 2}})   # ConfigError: unknown key 'cem.stpes'
                                                #   (did you mean 'cem.steps'?); allowed keys: steps, lr
    apply_overrides(cfg, ["kind=bidir"])        # new instance, cfg unchanged
    print(dumps_yaml(cfg))                      # the resolved config, loadable again

Annotations are resolved with ``typing.get_type_hints``, so config classes should live at
module level (string annotations naming function-local classes cannot be resolved).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from energyformer.utils.validate import ConfigError, closest

__all__ = ["ConfigError", "load_config", "from_dict", "to_dict", "dump_yaml", "dumps_yaml",
           "apply_overrides", "config_fields", "config_keys", "format_config_help", "type_name"]

T = TypeVar("T")
_NoneType = type(None)
_UNIONS = (Union, types.UnionType)
_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}
_NONE_WORDS = {"none", "null", "~"}
_REQUIRED = object()


# ----------------------------------------------------------------------------- type helpers
@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _init_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def _is_dc_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _dataclass_in(tp: Any) -> type | None:
    """The dataclass ``tp`` is, or the only dataclass member of a Union (e.g. ``Sub | None``)."""
    if _is_dc_type(tp):
        return tp
    if get_origin(tp) in _UNIONS:
        dcs = [a for a in get_args(tp) if _is_dc_type(a)]
        return dcs[0] if len(dcs) == 1 else None
    return None


def _mapping_types(tp: Any) -> tuple[Any, Any] | None:
    """(key type, value type) when ``tp`` (or its non-None member) is a dict type, else None."""
    if get_origin(tp) in _UNIONS:
        rest = [a for a in get_args(tp) if a is not _NoneType]
        tp = rest[0] if len(rest) == 1 else None
    if tp in (dict, Mapping):
        return Any, Any
    if get_origin(tp) in (dict, Mapping):
        args = get_args(tp)
        return (args[0], args[1]) if len(args) == 2 else (Any, Any)
    return None


def _is_container(tp: Any) -> bool:
    seq = get_origin(tp) or tp
    return bool(_is_dc_type(tp) or _mapping_types(tp)
                or seq in (list, tuple, set, frozenset, Sequence))


def type_name(tp: Any) -> str:
    """Readable annotation: ``int | None``, ``list[float]``, ``Literal['a', 'b']``."""
    if tp is _NoneType:
        return "None"
    if tp is Ellipsis:
        return "..."
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in _UNIONS:
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _join(prefix: str, name: Any) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def _type_error(key: str, value: Any, tp: Any) -> ConfigError:
    return ConfigError(f"{key} = {value!r}: expected {type_name(tp)}")


def _unknown_key(key: str, prefix: str, names: Sequence[str]) -> ConfigError:
    near = closest(key.rsplit(".", 1)[-1], names)
    hint = f" (did you mean {_join(prefix, near)!r}?)" if near else ""
    return ConfigError(f"unknown key {key!r}{hint}; allowed keys: {', '.join(names)}")


# ----------------------------------------------------------------------------- conversion
def _convert(value: Any, tp: Any, key: str, raw: str | None = None, lenient: bool = True) -> Any:
    """Check/coerce ``value`` against annotation ``tp``; ``raw`` is the override text, if any.

    ``lenient`` allows numeric strings for int/float, 0/1 and yes/no strings for bool, and
    'None' for None (used for plain fields, and as the second pass over a Union's members).
    """
    if tp is Any or tp is object:
        return value
    origin, args = get_origin(tp), get_args(tp)
    if origin in _UNIONS:
        return _convert_union(value, args, key, raw, tp)
    if tp is _NoneType:
        if value is None or (lenient and isinstance(value, str)
                             and value.strip().lower() in _NONE_WORDS):
            return None
        raise _type_error(key, value, tp)
    if origin is Literal:
        for lit in args:
            if value == lit and type(value) is type(lit):
                return lit
        if lenient and raw is not None and raw in args:
            return raw
        strs = [a for a in args if isinstance(a, str)]
        near = closest(value, strs) if isinstance(value, str) else None
        hint = f" (did you mean {near!r}?)" if near else ""
        raise ConfigError(f"{key} = {value!r}: allowed values are "
                          f"{', '.join(repr(a) for a in args)}{hint}")
    if _is_dc_type(tp):
        if isinstance(value, tp):
            return value
        if value is None:  # an empty YAML section ("model:") means all defaults
            value = {}
        if isinstance(value, Mapping):
            return from_dict(tp, value, key)
        raise _type_error(key, value, tp)
    seq = origin if origin is not None else tp
    if seq in (list, tuple, set, frozenset, Sequence):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise _type_error(key, value, tp)
        items = list(value)
        if seq is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(items) != len(args):
                raise ConfigError(f"{key} = {value!r}: expected {type_name(tp)} "
                                  f"({len(args)} items, got {len(items)})")
            return tuple(_convert(v, a, f"{key}[{i}]", None, lenient)
                         for i, (v, a) in enumerate(zip(items, args)))
        item_tp = args[0] if args else Any
        out = [_convert(v, item_tp, f"{key}[{i}]", None, lenient) for i, v in enumerate(items)]
        return list(out) if seq in (list, Sequence) else seq(out)
    kv = _mapping_types(tp)
    if kv is not None:
        if not isinstance(value, Mapping):
            raise _type_error(key, value, tp)
        return {_convert(k, kv[0], _join(key, k), None, True):
                _convert(v, kv[1], _join(key, k), None, lenient) for k, v in value.items()}
    if tp in (bool, int, float):
        out = _scalar(value, tp, lenient)
        if out is None:
            raise _type_error(key, value, tp)
        return out
    if tp is str:
        if isinstance(value, str):
            return value
        if raw is not None:  # --set run.name=2024 keeps the text
            return raw
        raise _type_error(key, value, tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if value is member or value == member.value or value == member.name:
                return member
        raise ConfigError(f"{key} = {value!r}: allowed values are "
                          f"{', '.join(repr(m.value) for m in tp)}")
    if isinstance(tp, type) and issubclass(tp, PurePath) and isinstance(value, (str, PurePath)):
        return tp(value)
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _type_error(key, value, tp)
    return value


def _scalar(value: Any, tp: type, lenient: bool) -> Any:
    """``value`` as bool/int/float, or None; lenient parses strings ('3e-4', '1e3', 'yes')."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        ok = lenient and isinstance(value, (int, str))
        return _BOOLS.get(str(value).strip().lower()) if ok else None
    if isinstance(value, bool):
        return None
    if lenient and isinstance(value, str):  # YAML 1.1 reads '3e-4' and '1e3' as strings
        try:
            return int(value) if tp is int else float(value)
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                return None
            return int(number) if number.is_integer() else None
    if isinstance(value, int):
        return value if tp is int else float(value)
    return value if isinstance(value, float) and tp is float else None


def _convert_union(value: Any, args: tuple, key: str, raw: str | None, tp: Any) -> Any:
    if _NoneType in args and (value is None or (
            raw is not None and raw.strip().lower() in _NONE_WORDS)):
        return None
    members = [a for a in args if a is not _NoneType]
    structured = isinstance(value, (Mapping, list, tuple))
    errors: list[ConfigError] = []
    # Strict pass first (so Union[str, float] keeps "3e-4" a string), then lenient, in order.
    for lenient in (False, True):
        for member in members:
            try:
                return _convert(value, member, key, raw if lenient else None, lenient)
            except ConfigError as err:
                if lenient and structured and _is_container(member):
                    errors.append(err)
    if len(errors) == 1:
        raise errors[0]  # e.g. an unknown key inside an Optional sub-config
    raise _type_error(key, value, tp)


def _construct(make: Any, prefix: str) -> Any:
    """Build a dataclass; prefix ``__post_init__`` errors with the sub-config's dotted path."""
    try:
        return make()
    except ValueError as err:
        msg = str(err)
        named = msg.startswith((f"{prefix}.", f"{prefix}:", f"{prefix} ")) or f"'{prefix}" in msg
        if prefix and not named:
            raise ConfigError(f"{prefix}: {msg}") from err
        if not isinstance(err, ConfigError):
            raise ConfigError(msg) from err
        raise


# ----------------------------------------------------------------------------- public API
def from_dict(cls: type[T], d: Mapping[str, Any] | None, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) mapping, strictly.

    >>> from_dict(Model, {"cem": {"steps": 2}}).cem.steps
    2
    """
    if not _is_dc_type(cls):
        raise TypeError(f"from_dict: {cls!r} is not a dataclass type")
    if d is None:
        d = {}
    if not isinstance(d, Mapping):
        raise ConfigError(f"{prefix or cls.__name__} = {d!r}: expected a mapping "
                          f"({cls.__name__} section)")
    fields, hints = _init_fields(cls), _hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in d.items():
        key = _join(prefix, name)
        if name not in fields:
            raise _unknown_key(key, prefix, list(fields))
        kwargs[name] = _convert(value, hints[name], key)
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING \
                and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required key {_join(prefix, name)!r} "
                              f"({type_name(hints[name])})")
    return _construct(lambda: cls(**kwargs), prefix)


def to_dict(obj: Any) -> Any:
    """Plain YAML-safe data (dicts, lists, scalars) for a config; inverse of ``from_dict``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, enum.Enum):
        return to_dict(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, Mapping):
        return {k if isinstance(k, (str, int, float, bool)) else str(k): to_dict(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_dict(v) for v in obj]
    return obj


def dumps_yaml(obj: Any) -> str:
    """The resolved config as YAML text (field order kept)."""
    return yaml.safe_dump(to_dict(obj), sort_keys=False, default_flow_style=False)


def dump_yaml(obj: Any, path: str | os.PathLike) -> Path:
    """Write the resolved config to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_yaml(obj), encoding="utf-8")
    return path


def _read_yaml(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: invalid YAML: {' '.join(str(err).split())}") from err
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data or {}


def _split_override(item: str) -> tuple[list[str], str]:
    key, sep, raw = str(item).partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or not all(parts):
        raise ConfigError(f"override {item!r} must look like 'a.b.c=value'")
    return parts, raw.strip()


def _parse_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _merge(base: Mapping, new: Mapping) -> dict:
    out = dict(base)
    for k, v in new.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = _merge(out[k], v) if both else v
    return out


def _as_mapping(node: Any) -> dict:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return to_dict(node)
    return dict(node) if isinstance(node, Mapping) else {}


def _set(node: Any, tp: Any, parts: list[str], raw: str, key: str, build: bool) -> Any:
    """Return ``node`` (annotated ``tp``) with the dotted ``parts`` set to the override ``raw``.

    ``build=False`` works on raw mappings (load_config); ``build=True`` on built dataclasses,
    rebuilt with ``dataclasses.replace`` so that ``__post_init__`` runs again.
    """
    dc = _dataclass_in(tp)
    if not parts:
        value = _parse_value(raw)
        if dc is not None and isinstance(value, Mapping):  # --set model.cem='{steps: 2}' merges
            merged = _merge(_as_mapping(node), value)
            return from_dict(dc, merged, key) if build else merged
        return _convert(value, tp, key, raw=raw)
    head, rest = parts[0], parts[1:]
    sub = _join(key, head)
    if dc is not None:
        fields = _init_fields(dc)
        if head not in fields:
            raise _unknown_key(sub, key, list(fields))
        child_tp = _hints(dc)[head]
        if not build:
            mapping = _as_mapping(node)
            mapping[head] = _set(mapping.get(head), child_tp, rest, raw, sub, build)
            return mapping
        if not isinstance(node, dc):  # an Optional sub-config that is None: start from defaults
            node = from_dict(dc, {}, key)
        new = _set(getattr(node, head), child_tp, rest, raw, sub, build)
        return _construct(lambda: dataclasses.replace(node, **{head: new}), key)
    kv = _mapping_types(tp)
    if kv is not None:
        mapping = dict(node) if isinstance(node, Mapping) else {}
        k = head if kv[0] in (Any, str) else _convert(_parse_value(head), kv[0], sub, raw=head)
        mapping[k] = _set(mapping.get(k), kv[1], rest, raw, sub, build)
        return mapping
    raise ConfigError(f"unknown key {sub!r}: {key!r} is {type_name(tp)}, not a section")


def apply_overrides(obj: T, overrides: Sequence[str]) -> T:
    """A NEW config with dotted ``"a.b=value"`` overrides applied; ``obj`` is not changed.

    >>> apply_overrides(cfg, ["cem.steps=5"]).cem.steps
    5
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    new = dataclasses.replace(obj)
    for item in overrides:
        parts, raw = _split_override(item)
        new = _set(new, type(obj), parts, raw, "", build=True)
    return new


def load_config(cls: type[T], source: Any = None, overrides: Sequence[str] = ()) -> T:
    """Build ``cls`` from defaults, a YAML file path or a dict, then dotted overrides.

    Overrides win over the file; validation (``__post_init__``) sees the final values.

    >>> load_config(Model, {"cem": {"steps": 4}}, ["cem.steps=2", "kind=bidir"]).cem.steps
    2
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    if isinstance(source, cls):
        return apply_overrides(source, overrides)
    if source is None:
        data: Any = {}
    elif isinstance(source, Mapping):
        data = source
    elif isinstance(source, (str, os.PathLike)):
        data = _read_yaml(source)
    else:
        raise TypeError(f"load_config: source must be None, a path or a mapping, not {source!r}")
    for item in overrides:
        parts, raw = _split_override(item)
        data = _set(data, cls, parts, raw, "", build=False)
    return from_dict(cls, data)


def config_fields(cls: type, prefix: str = "", _default: Any = None,
                  _seen: tuple = ()) -> list[tuple[str, str, Any, str]]:
    """(dotted key, type name, default, help) for every settable key of ``cls``, in order.

    Nested sub-configs are expanded; ``help`` comes from ``field(metadata={"help": ...})``.
    """
    out: list[tuple[str, str, Any, str]] = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key, tp = _join(prefix, f.name), hints[f.name]
        if _default is not None:
            default = getattr(_default, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _REQUIRED
        dc = _dataclass_in(tp)
        if dc is not None and dc not in _seen:
            if dc is not tp:  # Optional sub-config: list the key itself too
                out.append((key, type_name(tp), default, f.metadata.get("help", "")))
            sub_default = default if isinstance(default, dc) else None
            out += config_fields(dc, key, sub_default, _seen + (cls,))
        else:
            out.append((key, type_name(tp), default, f.metadata.get("help", "")))
    return out


def _fmt_default(value: Any) -> str:
    if value is _REQUIRED:
        return "<required>"
    if dataclasses.is_dataclass(value):
        return f"<{type(value).__name__}>"
    return repr(value)


def config_keys(cls: type) -> list[str]:
    """One ``"key: type = default"`` line per settable dotted key, e.g. ``'cem.steps: int = 3'``."""
    return [f"{k}: {t} = {_fmt_default(d)}" for k, t, d, _ in config_fields(cls)]


def format_config_help(cls: type) -> str:
    """An aligned table of keys, types, defaults and help, for ``--help``/``list`` output."""
    rows = config_fields(cls)
    doc = (cls.__doc__ or "").strip().splitlines()
    title = cls.__name__ if not doc or doc[0].startswith(f"{cls.__name__}(") \
        else f"{cls.__name__}: {doc[0]}"
    if not rows:
        return title
    wk = max(len(r[0]) for r in rows)
    wt = max(len(r[1]) for r in rows)
    lines = [title, "keys (override with --set KEY=VALUE):"]
    for key, tname, default, help_ in rows:
        line = f"  {key:<{wk}}  {tname:<{wt}}  = {_fmt_default(default)}"
        lines.append(f"{line}  # {help_}" if help_ else line)
    return "\n".join(lines)
