"""Typed configs on pydantic v2: strict keys, tagged unions by registry, YAML + dotted overrides.

Why pydantic (DESIGN.md "tagged configs"; evaluated against OmegaConf/Hydra structured configs and
draccus/jsonargparse): its models validate nested data with per-field constraints and report every
error with its full location; ``extra="forbid"`` rejects unknown keys; a ``kind`` field selects one
of several config classes (a tagged union) through a before-validator that looks the kind up in an
open :class:`Registry`, so a plugin registering a new attention or task needs no change here and
no schema rebuild. OmegaConf has no tagged unions (its ``Union`` support is primitives only) and
Hydra adds a second config composition system we do not need; draccus and jsonargparse are built
around command lines rather than nested YAML with registries. What this module adds on top:

* :class:`ConfigModel`: the base class (unknown keys with a "did you mean" hint, no inf/NaN).
* :class:`Registry`: name -> (config class, builder) for task / model / attention / MLP / solver /
  step-size kinds; ``registry.field("llama")`` declares a field whose ``kind`` picks the class.
* :func:`load_config`: defaults < YAML file (duplicate keys and empty files rejected) < dotted
  ``--set a.b.c=value`` overrides, then one validation; errors become one-line :class:`ConfigError`s
  naming the key, the value and what is allowed.
* :func:`to_dict` / :func:`dumps_yaml` (the resolved config saved in every run, loadable again),
  :func:`replace` (validated copy), :func:`config_fields` / :func:`format_config_help`
  (``energyformer list keys``).

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

import io
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import yaml
from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, ValidationError, model_validator,
)
from pydantic_core import PydanticCustomError

from energyformer.utils.validate import ConfigError, closest

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
            data = cls.migrate(dict(data))
            allowed = [n for n in cls.model_fields]
            for key in data:
                if key not in cls.model_fields:
                    raise _unknown_key_error(str(key), allowed)
        return data


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
    data gives no kind); a bare string is shorthand for ``{kind: string}``.
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
            if value is None:
                value = {}
            if not isinstance(value, Mapping):
                raise PydanticCustomError(
                    "kind_type", "expected a {what} kind name or a mapping with 'kind'",
                    {"what": self.what})
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


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line for the first error of ``err`` (plus how many more there are)."""
    items = err.errors(include_url=False)
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
        elif kind == "missing":
            lines.append(f"missing required key {_fmt_loc(loc)!r}")
            continue
        msg = msg[:1].lower() + msg[1:]
        where = _fmt_loc(loc)
        value = e.get("input")
        if kind == "unknown_kind":
            value = ctx.get("kind")
        if isinstance(value, Mapping) and kind not in ("unknown_kind",):
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


# ----------------------------------------------------------------------------- YAML
class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and reads 1e-3 / 1e3 as numbers (YAML 1.2 floats)."""


_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.?[0-9_]*(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X)
_StrictLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            mark = key_node.start_mark
            raise ConfigError(f"{mark.name}:{mark.line + 1}: duplicate key {key!r} "
                              f"(it is already set above; YAML would silently keep the last one)")
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _int_float(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def read_yaml(path: str | os.PathLike, *, inherit: bool = True) -> dict:
    """A YAML mapping from ``path``; empty files, duplicate keys and non-mappings are errors.

    With ``inherit`` (default) a top-level ``base:`` names another config this one derives
    from (:func:`resolve_base`): the result is the base with this file's keys merged over it.
    """
    data = _read_yaml_file(Path(path))
    return resolve_base(data, Path(path)) if inherit else data


#: the most ``base:`` links followed from one file (a longer chain is surely a mistake)
MAX_BASE_DEPTH = 16


def _base_path(name: Any, path: Path) -> Path:
    """The file a ``base:`` value names: a path ending in .yaml/.yml (relative to ``path``'s folder),
    or a config name like ``lm/llama`` looked up under the nearest enclosing ``configs/`` folder
    (else ``path``'s folder)."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{path}: base = {name!r}: must be a config name (e.g. lm/llama) or a YAML path")
    if name.endswith((".yaml", ".yml")):
        cand = Path(name) if Path(name).is_absolute() else path.parent / name
    else:
        root = next((p for p in path.resolve().parents if p.name == "configs"), path.parent)
        cand = root / f"{name}.yaml"
    if not cand.is_file():
        raise ConfigError(f"{path}: base = {name!r}: no such config ({cand} not found)")
    return cand


def _merge_over(base: Any, child: Any) -> Any:
    """``child`` merged over ``base``: mappings merge key by key, anything else is replaced. A
    mapping (or bare kind name) that picks another ``kind`` than the base's replaces the base's
    section instead of merging into it: the keys of one kind do not carry over to another."""
    bkind = base.get("kind") if isinstance(base, Mapping) else base if isinstance(base, str) else None
    ckind = child.get("kind") if isinstance(child, Mapping) else child if isinstance(child, str) else None
    if isinstance(child, str) and isinstance(base, Mapping) and "kind" in base:
        return child  # a bare kind name: that kind with its defaults
    if not (isinstance(base, Mapping) and isinstance(child, Mapping)):
        return child
    if ckind is not None and bkind is not None and ckind != bkind:
        return dict(child)
    out = dict(base)
    for k, v in child.items():
        out[k] = _merge_over(out[k], v) if k in out else v
    return out


def resolve_base(data: Mapping, path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Config inheritance: ``base: NAME`` pulls in another config, this file's keys win.

    Variants (LoRA ranks, ablations, sizes) state only what differs from the config they derive
    from. Chains are followed (a base may have a base); a cycle, a missing base or a chain longer
    than :data:`MAX_BASE_DEPTH` is a one-line :class:`ConfigError` naming the files.
    """
    data = dict(data)
    if "base" not in data:
        return data
    here = path.resolve()
    if here in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, here))
        raise ConfigError(f"config inheritance cycle: {chain}")
    if len(_seen) >= MAX_BASE_DEPTH:
        raise ConfigError(f"{path}: more than {MAX_BASE_DEPTH} base: links (is there a cycle?)")
    base_file = _base_path(data.pop("base"), path)
    base = resolve_base(_read_yaml_file(base_file), base_file, (*_seen, here))
    return _merge_over(base, data)


def _read_yaml_file(path: Path) -> dict:
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a YAML config file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file (is it a YAML config?)") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    stream = io.StringIO(text)
    stream.name = str(path)  # marks (duplicate keys, syntax errors) name the file
    try:
        data = yaml.load(stream, Loader=_StrictLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        raise ConfigError(f"{path}: the config file is empty (only comments or blank lines)")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, "
                          f"got {type(data).__name__}")
    return dict(data)


def _parse_value(raw: str) -> Any:
    if raw.strip() in ("none", "None", "NONE"):
        return None
    try:
        return yaml.load(raw, Loader=_StrictLoader)
    except (yaml.YAMLError, ConfigError):
        return raw


# ----------------------------------------------------------------------------- overrides
def _split_override(item: str) -> tuple[list[str], str]:
    key, sep, raw = str(item).partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or not all(p.strip() for p in parts):
        raise ConfigError(f"override {item!r} must look like 'a.b.c=value'")
    return parts, raw.strip()


def _merge(base: Mapping, new: Mapping) -> dict:
    out = dict(base)
    for k, v in new.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = _merge(out[k], v) if both else v
    return out


def _set_path(data: Any, parts: list[str], value: Any, done: str) -> dict:
    node = dict(data) if isinstance(data, Mapping) else ({"kind": data} if isinstance(data, str) else {})
    if data is not None and not isinstance(data, (Mapping, str)):
        raise ConfigError(f"unknown key {done + '.' + parts[0]!r}: {done!r} is a value, not a section")
    head, rest = parts[0], parts[1:]
    if not rest:
        if isinstance(value, Mapping) and isinstance(node.get(head), Mapping):
            node[head] = _merge(node[head], value)  # --set model.block={dropout: 0.1} merges
        else:
            node[head] = value
        return node
    node[head] = _set_path(node.get(head), rest, value, f"{done}.{head}" if done else head)
    return node


def apply_overrides(data: Mapping | BaseModel, overrides: Sequence[str]) -> Any:
    """Apply dotted ``"a.b=value"`` overrides (values parsed as YAML) to a mapping or config.

    A config gives back a NEW validated config of the same class; a mapping a new mapping.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    if isinstance(data, BaseModel):
        return _validate(type(data), apply_overrides(to_dict(data), overrides))
    out: dict = dict(data or {})
    for item in overrides:
        parts, raw = _split_override(item)
        out = _set_path(out, parts, _int_float(_parse_value(raw)) if raw else raw, "")
    return out


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


# ----------------------------------------------------------------------------- key listing
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
        help_ = (f.description or "").strip().splitlines()[0] if f.description else ""
        marker = _kind_marker(f.annotation) or next(
            (m for m in f.metadata if isinstance(m, _KindMarker)), None)
        if marker is not None:
            reg = marker.registry
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
