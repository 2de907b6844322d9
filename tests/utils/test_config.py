"""Tests for energyformer.utils.config: strict nested dataclass configs with dotted overrides."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Union

import pytest

try:
    import energyformer  # noqa: F401
except ImportError:  # not installed into the venv: use the src layout directly
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from energyformer.utils.config import (  # noqa: E402
    apply_overrides,
    config_fields,
    config_keys,
    dump_yaml,
    dumps_yaml,
    format_config_help,
    from_dict,
    load_config,
    to_dict,
)
from energyformer.utils.validate import ConfigError, check_int  # noqa: E402


@dataclass
class CEM:
    steps: int = 3
    lr: float = 0.1
    diagonal: Literal["none", "shared", "per_head"] = "shared"

    def __post_init__(self) -> None:
        check_int("steps", self.steps, min=1)


@dataclass
class Model:
    """A small model config."""

    dim: int = 16
    cem: CEM = field(default_factory=CEM)
    dropout: Optional[float] = None
    widths: list[int] = field(default_factory=lambda: [8, 8])
    kernel: tuple[int, ...] = (3, 3)
    extra: Optional[CEM] = None


@dataclass
class Run:
    model: Model = field(default_factory=Model)
    name: str = "run"
    seed: int | None = 0
    use_amp: bool = False
    tags: dict[str, float] = field(default_factory=dict)
    size: Union[int, str] = "auto"
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})


@dataclass
class Required:
    path: str
    n: int = 1


def test_defaults_and_nested_yaml(tmp_path):
    assert load_config(Run) == Run()
    f = tmp_path / "run.yaml"
    f.write_text("model:\n  dim: 32\n  cem:\n    steps: 5\n    diagonal: per_head\nname: exp1\n")
    cfg = load_config(Run, f)
    assert cfg.model.dim == 32 and cfg.model.cem.steps == 5 and cfg.model.cem.lr == 0.1
    assert cfg.model.cem.diagonal == "per_head" and cfg.name == "exp1"
    assert load_config(Run, str(f)) == cfg  # str path too
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(Run, empty) == Run()


def test_override_precedence(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("model:\n  cem:\n    steps: 5\nname: from_file\n")
    cfg = load_config(Run, f, ["model.cem.steps=2", "name=cli"])
    assert cfg.model.cem.steps == 2 and cfg.name == "cli"
    # later overrides win over earlier ones; dict sources are not mutated
    src = {"model": {"cem": {"steps": 4}}}
    cfg = load_config(Run, src, ["model.cem.steps=7", "model.cem.steps=8"])
    assert cfg.model.cem.steps == 8 and src == {"model": {"cem": {"steps": 4}}}
    # a mapping value merges into the section
    cfg = load_config(Run, src, ["model.cem={lr: 0.5}"])
    assert cfg.model.cem.steps == 4 and cfg.model.cem.lr == 0.5


def test_override_makes_invalid_file_value_valid():
    # validation runs on the final values, after overrides
    cfg = load_config(Run, {"model": {"cem": {"steps": 0}}}, ["model.cem.steps=1"])
    assert cfg.model.cem.steps == 1


def test_numeric_string_coercion(tmp_path):
    cfg = load_config(Run, None, ["lr=3e-4", "model.cem.lr=1e-2", "model.dim=1e3"])
    assert cfg.lr == pytest.approx(3e-4) and isinstance(cfg.lr, float)
    assert cfg.model.cem.lr == pytest.approx(1e-2)
    assert cfg.model.dim == 1000 and isinstance(cfg.model.dim, int)
    f = tmp_path / "r.yaml"
    f.write_text("lr: 3e-4\nmodel:\n  dropout: 1e-1\n")  # YAML 1.1 reads these as strings
    cfg = load_config(Run, f)
    assert cfg.lr == pytest.approx(3e-4) and cfg.model.dropout == pytest.approx(0.1)
    assert load_config(Run, {"lr": 2}).lr == 2.0 and isinstance(load_config(Run, {"lr": 2}).lr, float)


def test_wrong_type_names_key_value_and_type():
    with pytest.raises(ConfigError) as e:
        load_config(Run, None, ["model.dim=abc"])
    msg = str(e.value)
    assert "model.dim" in msg and "'abc'" in msg and "int" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"model\.dim = 2\.5: expected int"):
        load_config(Run, {"model": {"dim": 2.5}})
    with pytest.raises(ConfigError, match=r"model\.widths\[1\] = 'x': expected int"):
        load_config(Run, None, ["model.widths=[1, x]"])
    with pytest.raises(ConfigError, match=r"use_amp = 'maybe': expected bool"):
        load_config(Run, None, ["use_amp=maybe"])


def test_literal_errors():
    with pytest.raises(ConfigError) as e:
        load_config(Run, None, ["model.cem.diagonal=diag"])
    msg = str(e.value)
    assert "model.cem.diagonal" in msg and "'diag'" in msg
    assert "'none'" in msg and "'shared'" in msg and "'per_head'" in msg
    assert load_config(Run, None, ["model.cem.diagonal=none"]).model.cem.diagonal == "none"


def test_unknown_key_with_suggestion():
    with pytest.raises(ConfigError) as e:
        load_config(Run, {"model": {"cem": {"stpes": 2}}})
    msg = str(e.value)
    assert "unknown key 'model.cem.stpes'" in msg
    assert "did you mean 'model.cem.steps'?" in msg
    assert "allowed keys: steps, lr, diagonal" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="unknown key 'modle'.*did you mean 'model'"):
        load_config(Run, {"modle": {}})


def test_unknown_override_path():
    with pytest.raises(ConfigError, match=r"unknown key 'model\.cem\.stpes' \(did you mean 'model\.cem\.steps'\?\)"):
        load_config(Run, None, ["model.cem.stpes=2"])
    with pytest.raises(ConfigError, match="unknown key 'model.dim.x'"):
        load_config(Run, None, ["model.dim.x=2"])
    with pytest.raises(ConfigError, match="must look like"):
        load_config(Run, None, ["model.dim"])
    with pytest.raises(ConfigError, match="unknown key 'nope' \\(did you mean 'name'\\?\\)"):
        apply_overrides(Run(), ["nope.x=1"])


def test_optional_and_none():
    assert load_config(Run, None, ["model.dropout=0.1"]).model.dropout == pytest.approx(0.1)
    for text in ("null", "None", "~", "none"):
        assert load_config(Run, None, [f"seed={text}"]).seed is None
    assert load_config(Run, {"seed": None}).seed is None
    # Optional sub-config: setting a key creates it from defaults
    cfg = load_config(Run, None, ["model.extra.steps=4"])
    assert cfg.model.extra == CEM(steps=4)
    assert load_config(Run, {"model": {"extra": {"lr": 0.2}}}).model.extra == CEM(lr=0.2)
    with pytest.raises(ConfigError, match="unknown key 'model.extra.bad'"):
        load_config(Run, {"model": {"extra": {"bad": 1}}})


def test_lists_tuples_dicts():
    cfg = load_config(Run, None, ["model.widths=[1, 2, 3]", "model.kernel=[5]", "tags={a: 1, b: 2e-1}"])
    assert cfg.model.widths == [1, 2, 3] and cfg.model.kernel == (5,)
    assert cfg.tags == {"a": 1.0, "b": 0.2}
    assert load_config(Run, None, ["tags.c=0.5"]).tags == {"c": 0.5}
    with pytest.raises(ConfigError, match="model.widths = 3: expected list"):
        load_config(Run, {"model": {"widths": 3}})


def test_bool_parsing():
    for text, want in [("true", True), ("False", False), ("1", True), ("0", False),
                       ("yes", True), ("NO", False), ("TrUe", True)]:
        assert load_config(Run, None, [f"use_amp={text}"]).use_amp is want, text
    assert load_config(Run, {"use_amp": True}).use_amp is True


def test_str_and_union():
    assert load_config(Run, None, ["name=2024"]).name == "2024"
    assert load_config(Run, None, ["size=12"]).size == 12
    assert load_config(Run, None, ["size=big"]).size == "big"
    with pytest.raises(ConfigError, match=r"size = 1\.5: expected int \| str"):
        load_config(Run, {"size": 1.5})


def test_round_trip(tmp_path):
    cfg = load_config(Run, None, ["model.cem.steps=2", "model.extra.lr=0.3", "tags.x=1",
                                  "lr=3e-4", "model.kernel=[1, 2]"])
    assert from_dict(Run, to_dict(cfg)) == cfg
    path = dump_yaml(cfg, tmp_path / "out" / "resolved.yaml")
    assert load_config(Run, path) == cfg
    text = dumps_yaml(cfg)
    assert text.index("model:") < text.index("name:")  # field order kept
    assert to_dict(cfg)["model"]["kernel"] == [1, 2]


def test_post_init_errors_prefixed_with_path():
    with pytest.raises(ConfigError) as e:
        load_config(Run, None, ["model.cem.steps=0"])
    assert str(e.value) == "model.cem: steps = 0: must be an integer >= 1"
    with pytest.raises(ConfigError, match=r"^model\.cem: steps = 0"):
        apply_overrides(Run(), ["model.cem.steps=0"])
    with pytest.raises(ConfigError, match=r"^steps = 0"):  # root config: no prefix
        load_config(CEM, {"steps": 0})


def test_apply_overrides_returns_new_instance():
    base = Run()
    new = apply_overrides(base, ["model.cem.steps=9", "use_amp=yes", "lr=1e-2", "model.extra.steps=2"])
    assert new.model.cem.steps == 9 and new.use_amp is True and new.lr == pytest.approx(0.01)
    assert new.model.extra == CEM(steps=2)
    assert base == Run() and new is not base
    assert apply_overrides(base, []) == base
    assert load_config(Run, new, ["name=x"]) == apply_overrides(new, ["name=x"])


def test_required_fields():
    with pytest.raises(ConfigError, match="missing required key 'path'"):
        load_config(Required)
    assert load_config(Required, None, ["path=/tmp/x"]).path == "/tmp/x"


def test_config_keys_and_help():
    keys = config_keys(Run)
    assert "model.cem.steps: int = 3" in keys
    assert "model.dropout: float | None = None" in keys
    assert "model.cem.diagonal: Literal['none', 'shared', 'per_head'] = 'shared'" in keys
    assert "model.extra: CEM | None = None" in keys and "model.extra.steps: int = 3" in keys
    assert "lr: float = 0.001" in keys
    assert [k for k, *_ in config_fields(Run)][:2] == ["model.dim", "model.cem.steps"]
    assert "path: str = <required>" in config_keys(Required)
    text = format_config_help(Run)
    assert "model.cem.lr" in text and "# peak learning rate" in text
    assert format_config_help(Model).startswith("Model: A small model config.")


def test_bad_yaml_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(Run, f)
