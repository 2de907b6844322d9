"""Typed configs on pydantic v2: strict keys, tagged unions by registry, YAML + dotted overrides.

Why pydantic (DESIGN.md "tagged configs"; evaluated against OmegaConf/Hydra structured configs and
draccus/jsonargparse): its models validate nested data with per-field constraints and report every
error with its full location; ``extra="forbid"`` rejects unknown keys; a ``kind`` field selects one
of several config classes (a tagged union) through a before-validator that looks the kind up in an
open :class:`Registry`, so a plugin registering a new attention or task needs no change here and
no schema rebuild. OmegaConf has no tagged unions (its ``Union`` support is primitives only) and
Hydra adds a second config composition system we do not need; draccus and jsonargparse are built
around command lines rather than nested YAML with registries. What this module adds on top:

* :class:`ConfigModel`: the base class (unknown keys with a "did you mean" hint, no inf/NaN, no booleans
  where numbers go: YAML ``yes`` is not the integer 1).
* :class:`Registry`: name -> (config class, builder) for task / model / attention / MLP / solver /
  step-size kinds; ``registry.field("llama")`` declares a field whose ``kind`` picks the class.
* :func:`load_config`: defaults < YAML file (duplicate keys and empty files rejected, ``base:`` inheritance;
  :mod:`energyformer.utils.yaml_files`) < dotted ``--set a.b.c=value`` overrides
  (:mod:`energyformer.utils.overrides`), then one validation; errors
  become one-line :class:`ConfigError`s naming the key, the value and what is allowed.
* :func:`to_dict` / :func:`dumps_yaml` (the resolved config saved in every run, loadable again),
  :func:`replace` (validated copy); the key listing of ``energyformer list keys`` is
  :mod:`energyformer.utils.config_help`.

Example::

    class CEM(ConfigModel):
        kind: Literal["cem"] = "cem"
        steps: int = Field(1, ge=1)
        \"\"\"T recursive steps.\"\"\"

    ATTENTIONS = Registry("attention")
    ATTENTIONS.register("cem", CEM)(build_cem)

    class Block(ConfigModel):
        attention: ATTENTIONS.type("llama") = ATTENTIONS.field("llama")

    load_config(Block, {"attention": {"kind": "cem", "stpes": 2}})
    # ConfigError: unknown key 'attention.stpes' (did you mean 'attention.steps'?); ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, ValidationError, ValidationInfo, field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from energyformer.utils.config_errors import item_error, merge_union_errors
from energyformer.utils.config_numbers import OWN_INPUT, bool_for_number
from energyformer.utils.overrides import override_key, override_mapping  # noqa: F401 (API)
from energyformer.utils.validate import ConfigError, closest
from energyformer.utils.yaml_files import NoneWord
from energyformer.utils.yaml_files import (  # noqa: F401 (API)
    int_float, merge_over, parse_value, read_yaml, resolve_base)

__all__ = [
    "ConfigError", "ConfigModel", "KindConfig", "Registry", "Field", "load_config", "from_dict",
    "to_dict", "dumps_yaml", "dump_yaml", "read_yaml", "replace", "apply_overrides",
    "config_fields", "format_config_help", "format_validation_error",
]

T = TypeVar("T", bound=BaseModel)


# ----------------------------------------------------------------------------- base classes
class _ConfigMeta(type(BaseModel)):
    """Direct construction ``Cfg(steps=0)`` raises the same one-line :class:`ConfigError` as
    :func:`load_config` (nested validation does not go through here, so locations stay intact)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err)) from None


def _takes_none_text(annotation: Any) -> bool:
    """whether a field of this type accepts the string 'none': a Literal with 'none' among its choices, or a
    registry's kind field with a kind named 'none' (in a union, an Optional, Annotated metadata)"""
    marker = _kind_marker(annotation)
    if marker is not None:
        return "none" in marker.registry.entries
    if get_origin(annotation) is Literal:
        return "none" in get_args(annotation)
    return any(_takes_none_text(a) for a in get_args(annotation) if a is not None)


def resolve_none_word(annotation: Any) -> str | None:
    """``none`` given as an override's value (:data:`NONE_WORD`): the string 'none' for a field that has a choice
    of that name (``model.block.norm=none``: no norm; it used to be null, i.e. the default norm), else null
    (``seed=none``)."""
    return "none" if _takes_none_text(annotation) else None


class ConfigModel(BaseModel, metaclass=_ConfigMeta):
    """Base of every config: unknown keys are errors (with a hint), finite numbers only.

    Field help for ``energyformer list keys`` comes from the docstring under each field.
    """

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, allow_inf_nan=False, coerce_numbers_to_str=True,
        use_attribute_docstrings=True, validate_default=True, protected_namespaces=(),
    )

    @classmethod
    def migrate(cls, data: dict) -> dict:
        """Rewrite old spellings of this config's keys into today's (identity by default).

        Called on the raw mapping before any key check, by direct construction, nested validation
        and registry dispatch alike, so resolved configs saved by older versions keep loading."""
        return data

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = {k: resolve_none_word(cls.model_fields[k].annotation) if isinstance(v, NoneWord)
                    and k in cls.model_fields else v for k, v in data.items()}
            data = cls.migrate(data)
            allowed = [n for n in cls.model_fields]
            for key in data:
                if key not in cls.model_fields:
                    raise _unknown_key_error(str(key), allowed)
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Pydantic's lax mode reads ``True`` as 1 (and 1.0): refuse a boolean where only numbers are allowed."""
        if isinstance(value, (bool, list, tuple, Mapping)) and info.field_name in cls.model_fields:
            field = cls.model_fields[info.field_name]
            if not any(isinstance(m, OWN_INPUT) for m in field.metadata):
                found = bool_for_number(field.annotation, value)
                if found is not None:
                    at, item, what = found
                    raise PydanticCustomError("bool_not_number", "expected {what}, not a boolean",
                                              {"what": what, "at": at, "item": item})
        return value


    @field_validator("*", mode="after")
    @classmethod
    def _int64(cls, value: Any, info: ValidationInfo) -> Any:
        """Integers fit int64 (what torch and numpy take): a larger one (``task.batch_size=99999999999999999999``)
        went on to an internal error ("Overflow when unpacking long long") that named no key."""
        bad = _outside_int64(value)
        if bad is not None:
            raise PydanticCustomError("int64", "out of range: integers must lie in [-2^63, 2^63 - 1]",
                                      {"value": bad})
        return value


def _outside_int64(value: Any) -> int | None:
    """The first integer in ``value`` (a number, or one inside lists, tuples and mappings) outside int64, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if not -2**63 <= value <= 2**63 - 1 else None
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return next((b for b in map(_outside_int64, items) if b is not None), None)


class KindConfig(ConfigModel):
    """Base of a config selected by ``kind`` from a :class:`Registry` (a tagged-union member)."""

    kind: str


def _unknown_key_error(key: str, allowed: Sequence[str], extra: str = "") -> PydanticCustomError:
    near = closest(key, allowed)
    return PydanticCustomError(
        "unknown_key", "unknown key{extra}; allowed keys: {allowed}",
        {"key": key, "near": near or "", "allowed": ", ".join(allowed), "extra": extra})


# ----------------------------------------------------------------------------- registries
@dataclass
class Entry:
    """One registered kind: its config class, its builder and a one-line description."""

    name: str
    config: type[KindConfig]
    builder: Any
    doc: str


class Registry:
    """Open registry ``kind name -> (config class, builder)``; the kind field of a tagged union.

    ``register(name, ConfigClass)`` decorates a builder (a class or a function); the config class
    declares ``kind: Literal[name] = name``. Duplicate names are errors. ``type(default)`` and
    ``field(default)`` declare a config field whose ``kind`` selects the class (default when the
    data gives no kind); a bare string is shorthand for ``{kind: string}``. ``null`` is refused: it names no
    kind (leaving the key out gives the default).
    """

    def __init__(self, what: str):
        self.what = what
        self.entries: dict[str, Entry] = {}

    def register(self, name: str, config: type[KindConfig], doc: str | None = None) -> Callable:
        if name in self.entries:
            raise ValueError(f"{self.what} kind {name!r} is already registered "
                             f"(by {self.entries[name].builder!r})")
        kind_field = config.model_fields.get("kind")
        if kind_field is None or kind_field.default != name:
            raise TypeError(f"{config.__name__} must declare kind: Literal[{name!r}] = {name!r}")

        def deco(builder):
            text = doc or (builder.__doc__ or config.__doc__ or "").strip()
            self.entries[name] = Entry(name, config, builder, text.splitlines()[0] if text else "")
            return builder

        return deco

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> Entry:
        if name not in self.entries:
            near = closest(str(name), self.names())
            hint = f" (did you mean {near!r}?)" if near else ""
            raise ConfigError(f"unknown {self.what} kind {name!r}{hint}; registered: "
                              f"{', '.join(self.names()) or '(none)'}")
        return self.entries[name]

    def build(self, cfg: KindConfig, *args: Any, **kwargs: Any) -> Any:
        """Call the builder registered for ``cfg.kind`` with ``(cfg, *args, **kwargs)``."""
        return self.get(cfg.kind).builder(cfg, *args, **kwargs)

    # -- pydantic field support
    def _validate(self, default: str):
        def dispatch(value: Any) -> Any:
            if isinstance(value, KindConfig):
                return value
            if isinstance(value, str):
                value = {"kind": value}
            if not isinstance(value, Mapping):  # null too: it is no kind, not "the default kind"
                raise PydanticCustomError(
                    "kind_type",
                    "expected a kind name or a mapping with 'kind'{null}; registered {what} kinds: {names}",
                    {"what": self.what, "null": ", not null" if value is None else "",
                     "names": ", ".join(self.names())})
            kind = value.get("kind", default)
            if not isinstance(kind, str) or kind not in self.entries:
                near = closest(str(kind), self.names())
                raise PydanticCustomError(
                    "unknown_kind", "unknown {what} kind {kind_repr}{hint}; registered: {names}",
                    {"what": self.what, "kind": kind, "kind_repr": repr(kind), "names": ", ".join(self.names()),
                     "hint": f" (did you mean {near!r}?)" if near else "", "key": "kind"})
            cls = self.entries[kind].config
            value = cls.migrate(dict(value))
            for key in value:
                if key not in cls.model_fields:
                    others = [n for n, e in self.entries.items() if key in e.config.model_fields]
                    extra = (f" for {self.what} kind {kind!r}"
                             + (f"; kinds that accept it: {', '.join(others)}" if others else ""))
                    raise _unknown_key_error(str(key), list(cls.model_fields), extra)
            return cls.model_validate({**value, "kind": kind})

        return dispatch

    def type(self, default: str) -> Any:
        """Annotation of a field holding one of this registry's configs (``default`` kind if unset)."""
        return Annotated[SerializeAsAny[KindConfig], BeforeValidator(self._validate(default)),
                         _KindMarker(self, default)]

    def field(self, default: str, **kwargs: Any) -> Any:
        """``Field`` whose default is the ``default`` kind's config with its own defaults."""
        return Field(default_factory=lambda: self.get(default).config(), **kwargs)


@dataclass(frozen=True)
class _KindMarker:
    registry: Registry
    default: str


def _kind_marker(annotation: Any) -> _KindMarker | None:
    if get_origin(annotation) is Annotated:
        for meta in get_args(annotation)[1:]:
            if isinstance(meta, _KindMarker):
                return meta
    return None


# ----------------------------------------------------------------------------- errors
def _fmt_loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).startswith(("function-", "lax-", "json-")):
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: pydantic error types of a scalar (or list) field given something else: given a mapping, the key was set as if
#: it were a section (``--set train.steps.x=1`` on a config that leaves steps at its default)
_SCALAR_TYPE_ERRORS = {"int_type", "float_type", "string_type", "bool_type", "tuple_type", "list_type",
                       "literal_error", "int_parsing", "float_parsing", "bool_parsing"}


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line for the first error of ``err`` (plus how many more there are)."""
    items = merge_union_errors(err.errors(include_url=False))
    lines = []
    for e in items[:1]:
        loc = [p for p in ([prefix] if prefix else []) + list(e["loc"])]
        ctx = e.get("ctx") or {}
        kind = e["type"]
        if kind in ("unknown_key", "extra_forbidden"):
            key = ctx.get("key", loc[-1] if loc else "")
            base = loc if kind == "unknown_key" else loc[:-1]
            full = _fmt_loc(list(base) + [key])
            near = ctx.get("near")
            hint = f" (did you mean {_fmt_loc(list(base) + [near])!r}?)" if near else ""
            allowed = f"; allowed keys: {ctx['allowed']}" if ctx.get("allowed") else ""
            lines.append(f"unknown key {full!r}{ctx.get('extra', '')}{hint}{allowed}")
            continue
        if kind == "unknown_kind":
            loc = list(loc) + ["kind"]
        elif kind == "bool_not_number":  # the boolean's own place: widths[1], weights.b
            loc = list(loc) + list(ctx.get("at", ()))
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        elif msg.startswith("Assertion failed, "):
            msg = msg[len("Assertion failed, "):]
        if kind == "literal_error" and isinstance(e.get("input"), str):
            options = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
            near = closest(e["input"], options)
            msg = f"allowed values are {ctx.get('expected', '')}" + (
                f" (did you mean {near!r}?)" if near else "")
        elif kind == "missing" and (few := item_error(e)):  # a fixed-length list given too few items: betas = [0.9]
            lines.append(f"{_fmt_loc(loc[:-1])} = {_short(e.get('input'))}: {few}")
            continue
        elif kind == "missing":
            lines.append(f"missing required key {_fmt_loc(loc)!r}")
            continue
        elif kind in ("tuple_type", "list_type"):
            msg = f"{msg} (a list, e.g. [a, b])"
        msg = msg[:1].lower() + msg[1:]
        where = _fmt_loc(loc)
        value = e.get("input")
        if kind == "unknown_kind":
            value = ctx.get("kind")
        elif kind == "bool_not_number":
            value = ctx.get("item")
        if isinstance(value, Mapping) and kind in _SCALAR_TYPE_ERRORS and where:  # --set train.steps.x=1
            lines.append(f"unknown key {_fmt_loc(list(loc) + [next(iter(value), '')])!r}: {where!r} is a value, not "
                         "a section")
        elif isinstance(value, Mapping) and kind not in ("unknown_kind",):
            lines.append(f"{where}: {msg}" if where else msg)
        else:
            lines.append(f"{where} = {_short(value)}: {msg}" if where else msg)
    more = f" (and {len(items) - 1} more error{'s' if len(items) > 2 else ''})" if len(items) > 1 else ""
    return lines[0] + more


def _validate(cls: type[T], data: Any, prefix: str = "") -> T:
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None


# ----------------------------------------------------------------------------- overrides
def apply_overrides(data: Mapping | BaseModel, overrides: Sequence[str]) -> Any:
    """Apply dotted ``"a.b=value"`` overrides (values parsed as YAML) to a mapping or config
    (:func:`energyformer.utils.overrides.override_mapping`: kind switches first, the last of a repeated key wins).

    A config gives back a NEW validated config of the same class; a mapping a new mapping.
    """
    if isinstance(data, BaseModel):
        return _validate(type(data), override_mapping(to_dict(data), overrides))
    return override_mapping(data, overrides)


# ----------------------------------------------------------------------------- public API
def load_config(cls: type[T], source: Any = None, overrides: Sequence[str] = ()) -> T:
    """Build ``cls`` from its defaults, a YAML path or a mapping, then dotted overrides.

    Overrides win over the file; validation sees the final values only.
    """
    if isinstance(source, BaseModel):
        data: Any = to_dict(source)
    elif source is None:
        data = {}
    elif isinstance(source, Mapping):
        data = dict(source)
    elif isinstance(source, (str, os.PathLike)):
        data = read_yaml(source)
    else:
        raise TypeError(f"load_config: source must be None, a path, a mapping or a config, not {source!r}")
    return _validate(cls, apply_overrides(data, overrides))


def from_dict(cls: type[T], data: Mapping | None) -> T:
    """Validate a (nested) mapping into ``cls``; errors are one-line :class:`ConfigError`s."""
    return _validate(cls, data or {})


def replace(cfg: T, **updates: Any) -> T:
    """A validated copy of ``cfg`` with top-level fields replaced."""
    return _validate(type(cfg), {**to_dict(cfg), **{k: to_dict(v) for k, v in updates.items()}})


def to_dict(obj: Any) -> Any:
    """Plain YAML-safe data (dicts, lists, scalars); the inverse of :func:`from_dict`."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


#: ``Field(json_schema_extra={HASH_NEUTRAL: True})``: an option added after runs were recorded whose default is
#: the behaviour before it; :func:`hash_view` leaves it out while it holds that default, so the records of a
#: study stay the same runs (studies.runner.config_hash) — a changed default would not, so never mark one
HASH_NEUTRAL = "hash_neutral"


def hash_view(obj: Any) -> Any:
    """:func:`to_dict` without the hash-neutral options (:data:`HASH_NEUTRAL`) that hold their defaults."""
    return _drop_neutral(obj, to_dict(obj))


def _drop_neutral(obj: Any, data: Any) -> Any:
    if isinstance(obj, BaseModel) and isinstance(data, dict):
        for name, f in type(obj).model_fields.items():
            if name not in data:
                continue
            value = getattr(obj, name)
            extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
            if extra.get(HASH_NEUTRAL) and value == f.get_default(call_default_factory=True):
                del data[name]
            else:
                _drop_neutral(value, data[name])
    elif isinstance(obj, Mapping) and isinstance(data, dict):
        for k, v in obj.items():
            if k in data:
                _drop_neutral(v, data[k])
    elif isinstance(obj, (list, tuple)) and isinstance(data, list):
        for v, d in zip(obj, data):
            _drop_neutral(v, d)
    return data


def dumps_yaml(obj: Any) -> str:
    """The resolved config as YAML text (field order kept)."""
    return yaml.safe_dump(to_dict(obj), sort_keys=False, default_flow_style=False)


def dump_yaml(obj: Any, path: str | os.PathLike) -> Path:
    """Write the resolved config to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_yaml(obj), encoding="utf-8")
    return path


def __getattr__(name: str) -> Any:
    """``config_fields`` / ``format_config_help`` moved to :mod:`energyformer.utils.config_help` (still importable
    from here)."""
    if name in ("config_fields", "format_config_help"):
        from energyformer.utils import config_help

        return getattr(config_help, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
