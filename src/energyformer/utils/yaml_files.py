"""YAML config files: strict loading and ``base:`` inheritance (split out of :mod:`energyformer.utils.config`).

* :class:`_StrictLoader`: ``yaml.SafeLoader`` that rejects duplicate keys (naming file and line) and reads
  ``1e-3`` / ``1e3`` as numbers (YAML 1.2 floats) that keep their text (:class:`TextInt`, :class:`TextFloat`:
  a text key gets what was typed, a number key the number);
* :func:`read_yaml`: a mapping from a file, empty files and non-mappings rejected, ``base: NAME`` resolved
  (:func:`resolve_base`: the base's keys with this file's merged over them, chains followed, cycles refused);
* :func:`parse_value`: one ``--set`` value parsed as YAML (``none`` as None; unparsable text kept as text).

Every error is a one-line :class:`~energyformer.utils.validate.ConfigError` naming the file.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energyformer.utils.io import read_text_file
from energyformer.utils.validate import ConfigError

__all__ = ["read_yaml", "resolve_base", "parse_value", "int_float", "MAX_BASE_DEPTH", "NONE_WORD", "NoneWord",
           "TextFloat", "TextInt"]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and reads numbers as YAML 1.2 does: 1e-3 / 1e3 are floats, and
    integers are decimal (``010`` is 10, not YAML 1.1's octal 8), ``0x``/``0o`` hexadecimal/octal; YAML 1.1's
    base 60 (``1:30``) and binary (``0b11``) stay text, which a number key then refuses by name. Dates stay text too
    (no key takes a date): ``name=2024-01-05`` is that name, not a ``datetime.date`` that a text key refused."""


_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.?[0-9_]*(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X)
_INT_RE = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$")
_NUMBER_TAGS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int")
_NOT_IMPLICIT = (*_NUMBER_TAGS, "tag:yaml.org,2002:timestamp")
_StrictLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in _NOT_IMPLICIT]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_RE, list("-+0123456789"))
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


class _KeepsText:
    """A number that keeps the text it was written as: ``str()`` and ``repr()`` give the text back."""

    text: str

    def __new__(cls, value: Any, text: str) -> Any:
        out = super().__new__(cls, value)  # int's or float's (the next class in the subclass's MRO)
        out.text = text
        return out

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__  # error messages quote the value as typed ("name = +5", not "name = 5")

    def __reduce__(self) -> tuple:
        """pickle / copy.deepcopy rebuild it with its text: int's and float's own reduce pass the value alone, which
        ``__new__`` refuses (a parsed mapping or an ``Any`` field's value sent to a spawned worker failed so)"""
        return type(self), ((int if isinstance(self, int) else float)(self), self.text)


class TextInt(_KeepsText, int):
    """An integer read from YAML with its text: a text key (``name``, a file, a label) gets exactly what was
    typed — ``--set name=010`` is '010', not '10' — while a number key validates it as the int it is (configs
    hold plain ints after validation)."""


class TextFloat(_KeepsText, float):
    """A float read from YAML with its text (:class:`TextInt`): ``name=1e-3`` stays '1e-3', not '0.001'."""


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    raw = str(loader.construct_scalar(node))
    text = raw.replace("_", "")
    if text.startswith(("0x", "0o")):
        return TextInt(int(text[2:], 16 if text[1] == "x" else 8), raw)
    return TextInt(int(text, 10), raw)


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    return TextFloat(loader.construct_yaml_float(node), str(node.value))


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


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


def int_float(value: Any) -> Any:
    """A float with an integer value (below 2^53) as an int: ``--set steps=1e3`` is 1000."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return TextInt(int(value), value.text) if isinstance(value, TextFloat) else int(value)
    return value


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
    (else ``path``'s folder), then among the library's own configs (those ``energyformer train NAME`` runs), so
    a config kept anywhere can derive from them."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{path}: base = {name!r}: must be a config name (e.g. lm/llama) or a YAML path")
    if name.endswith((".yaml", ".yml")):
        cands = [Path(name) if Path(name).is_absolute() else path.parent / name]
    else:
        root = next((p for p in path.resolve().parents if p.name == "configs"), path.parent)
        cands = list(dict.fromkeys([root / f"{name}.yaml", LIBRARY_CONFIGS / f"{name}.yaml"]))
    found = next((c for c in cands if c.is_file()), None)
    if found is None:
        raise ConfigError(f"{path}: base = {name!r}: no such config ({' or '.join(map(str, cands))} not found)")
    return found


def checkout_root() -> Path | None:
    """The root of the repository checkout this package runs from (``src/energyformer`` below it: a checkout or an
    editable install), or None for an installed package (a wheel)."""
    root = Path(__file__).resolve().parents[3]  # src/energyformer/utils/yaml_files.py in a checkout
    return root if (root / "src" / "energyformer").is_dir() else None


def library_folder(name: str) -> Path:
    """The library's own ``name`` folder (``configs``, ``studies``): the checkout's, beside ``src/``
    (:func:`checkout_root`), else the copy a built wheel carries in the package, ``energyformer/_data/<name>``
    (setup.py). The path is returned whether or not it exists; callers fall back to ``./<name>``."""
    root = checkout_root()
    if root is not None and (root / name).is_dir():
        return root / name
    return Path(__file__).resolve().parents[1] / "_data" / name


#: the library's configs (``energyformer train lm/llama``): the repository's configs/ beside src/, or the wheel's copy
LIBRARY_CONFIGS = library_folder("configs")


def merge_over(base: Any, child: Any) -> Any:
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
        out[k] = merge_over(out[k], v) if k in out else v
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
    return merge_over(base, data)


def _read_yaml_file(path: Path) -> dict:
    stream = io.StringIO(read_text_file(path, ConfigError, str(path), "a YAML config file"))
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


class NoneWord(str):
    """``none`` written as an override's value: the string 'none' where the key takes it (a kind or choice named
    none: ``model.block.norm=none``, ``model.positions=none``), else null (``seed=none``); resolved per key by
    ``ConfigModel`` before validation (``utils.config.resolve_none_word``)."""


#: the value ``parse_value`` gives ``none`` (a str, so code before the resolution reads it as the word)
NONE_WORD = NoneWord("none")


def parse_value(raw: str) -> Any:
    """One override value parsed as YAML; ``none`` is :data:`NONE_WORD` (the word where the key has a choice
    named none, else null) and text YAML cannot parse stays text."""
    if raw.strip() in ("none", "None", "NONE"):
        return NONE_WORD
    try:
        return yaml.load(raw, Loader=_StrictLoader)
    except (yaml.YAMLError, ConfigError):
        return raw
