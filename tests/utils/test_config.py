"""utils.config: strict pydantic configs, registry-dispatched kinds, YAML and dotted overrides."""

from __future__ import annotations

import re
from typing import Any, Literal

import pytest
from pydantic import Field

from energyformer.utils.config import (
    ConfigModel, KindConfig, Registry, apply_overrides, config_fields, dump_yaml, dumps_yaml,
    format_config_help, from_dict, load_config, read_yaml, replace, to_dict,
)
from energyformer.utils.validate import ConfigError

ATT = Registry("attention")


class Llama(KindConfig):
    """Llama attention."""

    kind: Literal["llama"] = "llama"
    rope_theta: float = Field(10000.0, gt=0)
    """RoPE base"""


class CEM(KindConfig):
    kind: Literal["cem"] = "cem"
    steps: int = Field(3, ge=1)
    """T recursive steps"""
    lr: float = 0.1
    diagonal: Literal["none", "shared", "per_head"] = "shared"


ATT.register("llama", Llama)(lambda c: "built llama")
ATT.register("cem", CEM)(lambda c, dim: f"built cem {dim}")


class Model(ConfigModel):
    """A small model config."""

    dim: int = Field(16, ge=1)
    attention: ATT.type("llama") = ATT.field("llama")
    dropout: float | None = None
    widths: list[int] = Field(default_factory=lambda: [8, 8])
    kernel: tuple[int, int] = (3, 3)


class Run(ConfigModel):
    model: Model = Field(default_factory=Model)
    name: str = "run"
    seed: int | None = 0
    use_amp: bool = False
    tags: dict[str, float] = Field(default_factory=dict)
    lr: float = Field(1e-3, gt=0)
    """peak learning rate"""


def test_defaults_yaml_and_overrides(tmp_path):
    assert load_config(Run) == Run()
    f = tmp_path / "run.yaml"
    f.write_text("model:\n  dim: 32\n  attention: {kind: cem, steps: 5}\nname: exp1\n")
    cfg = load_config(Run, f)
    assert cfg.model.dim == 32 and cfg.model.attention.steps == 5 and cfg.model.attention.lr == 0.1
    cfg = load_config(Run, f, ["model.attention.steps=2", "name=cli", "lr=3e-4", "model.dim=1e3"])
    assert (cfg.model.attention.steps, cfg.name, cfg.lr, cfg.model.dim) == (2, "cli", 3e-4, 1000)
    assert load_config(Run, None, ["model.attention=cem"]).model.attention == CEM()
    # a string shorthand in the data becomes a section when a key inside it is overridden
    assert load_config(Run, {"model": {"attention": "cem"}}, ["model.attention.steps=7"]).model.attention.steps == 7
    assert load_config(Run, None, ["model.widths=[1, 2, 3]", "tags={a: 1}", "tags.b=0.5"]).tags == {"a": 1.0, "b": 0.5}
    assert load_config(Run, None, ["seed=none"]).seed is None and load_config(Run, None, ["seed=null"]).seed is None
    assert load_config(Run, None, ["name=2024"]).name == "2024"
    for text, want in (("true", True), ("yes", True), ("off", False), ("0", False)):
        assert load_config(Run, None, [f"use_amp={text}"]).use_amp is want


def test_errors_are_one_line_with_key_value_and_allowed():
    cases = {
        "model.attention.stpes=2": "unknown key 'model.attention.stpes' for attention kind 'llama'",
        "model.dmi=3": "unknown key 'model.dmi' (did you mean 'model.dim'?); allowed keys: dim, attention",
        "model.attention.kind=cme": "model.attention.kind = 'cme': unknown attention kind 'cme' (did you mean 'cem'?); registered: llama, cem",
        "lr=inf": "lr = 'inf': input should be a finite number",
        "lr=0": "lr = 0: input should be greater than 0",
        "model.dim=abc": "model.dim = 'abc': input should be a valid integer",
        "use_amp=maybe": "use_amp = 'maybe'",
        "model.kernel=[1, 2, 3]": "model.kernel = [1, 2, 3]",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError) as info:
            load_config(Run, None, [override])
        assert message in str(info.value), (override, str(info.value))
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"kinds that accept it: cem"):
        load_config(Run, None, ["model.attention.steps=2"])
    with pytest.raises(ConfigError, match=r"^model.attention.steps = 0: input should be greater than or equal to 1$"):
        load_config(Run, None, ["model.attention=cem", "model.attention.steps=0"])
    with pytest.raises(ConfigError, match=r"allowed values are 'none', 'shared' or 'per_head' \(did you mean 'shared'\?\)"):
        load_config(Run, None, ["model.attention=cem", "model.attention.diagonal=shard"])
    with pytest.raises(ConfigError, match="must look like 'a.b.c=value'"):
        load_config(Run, None, ["model.dim"])
    with pytest.raises(ConfigError, match="^steps = 0: input should be greater than or equal to 1$"):
        CEM(steps=0)  # direct construction gives the same one-line errors


def test_yaml_rejects_duplicates_empty_dirs_and_non_mappings(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: a\nlr: 1.0e-3\nname: b\n")
    with pytest.raises(ConfigError, match=r"dup.yaml:3: duplicate key 'name'"):
        read_yaml(dup)
    nested = tmp_path / "nested.yaml"
    nested.write_text("model:\n  dim: 3\n  dim: 4\n")
    with pytest.raises(ConfigError, match=r"nested.yaml:3: duplicate key 'dim'"):
        load_config(Run, nested)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n\n")
    with pytest.raises(ConfigError, match="the config file is empty"):
        load_config(Run, empty)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(Run, tmp_path)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(Run, lst)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(Run, bad)
    sci = tmp_path / "sci.yaml"
    sci.write_text("lr: 3e-4\nmodel: {dim: 1e3}\n")  # YAML 1.1 would read these as strings
    assert load_config(Run, sci).lr == 3e-4


def test_round_trip_replace_and_apply(tmp_path):
    cfg = load_config(Run, None, ["model.attention=cem", "model.attention.steps=2", "tags.x=1"])
    assert from_dict(Run, to_dict(cfg)) == cfg
    path = dump_yaml(cfg, tmp_path / "sub" / "cfg.yaml")
    assert load_config(Run, path) == cfg
    assert "kind: cem" in dumps_yaml(cfg)
    new = apply_overrides(cfg, ["model.attention.steps=9"])
    assert new.model.attention.steps == 9 and cfg.model.attention.steps == 2
    assert replace(cfg, name="x").name == "x"
    with pytest.raises(ConfigError):
        replace(cfg, lr=-1.0)


def test_registry_build_errors_and_listing():
    assert ATT.build(CEM(), 8) == "built cem 8"
    with pytest.raises(ConfigError, match=r"unknown attention kind 'x'; registered: llama, cem"):
        ATT.get("x")
    with pytest.raises(ValueError, match="already registered"):
        ATT.register("cem", CEM)
    with pytest.raises(TypeError, match=r"must declare kind"):
        Registry("t").register("other", CEM)
    keys = [r[0] for r in config_fields(Run)]
    assert "model.attention.kind" in keys and "model.attention[kind=cem].steps" in keys
    assert "model.attention[kind=llama].rope_theta" in keys and "lr" in keys
    text = format_config_help(Run)
    assert "peak learning rate" in text and "T recursive steps" in text


def test_hash_view_drops_hash_neutral_options_only_at_their_default():
    """An option added after runs were recorded (Field json_schema_extra hash_neutral) leaves a run's hash as it
    was while it holds its default (the old behaviour), and changes it otherwise; other fields always count."""
    from pydantic import BaseModel, Field

    from energyformer.studies.runner import config_hash
    from energyformer.utils.config import HASH_NEUTRAL, hash_view, to_dict

    class Old(BaseModel):
        a: int = 1
        inner: dict = Field(default_factory=dict)

    class Part(BaseModel):
        x: float = 2.0
        new: float = Field(1.0, json_schema_extra={HASH_NEUTRAL: True})

    class New(BaseModel):
        a: int = 1
        inner: dict = Field(default_factory=dict)
        parts: list[Part] = Field(default_factory=lambda: [Part()])
        added: str = Field("same", json_schema_extra={HASH_NEUTRAL: True})

    new = New()
    assert hash_view(new) == {"a": 1, "inner": {}, "parts": [{"x": 2.0}]}
    assert "added" in to_dict(new)   # the config file still records it
    assert hash_view(New(added="other"))["added"] == "other"
    assert hash_view(New(parts=[Part(new=-1.0)]))["parts"] == [{"x": 2.0, "new": -1.0}]
    assert config_hash(New()) != config_hash(New(added="other")) != config_hash(New(parts=[Part(new=3.0)]))
    assert config_hash(Old()) != config_hash(New())   # parts is not neutral: a new field without the mark counts


def test_hyperset_beta_scale_is_hash_neutral():
    """attention.beta_scale came after the Hyper-SET records: at its default (1, the paper's β) the recorded
    runs keep their hashes (the Sudoku study's committed records; tests/reproduce/test_hyperset_sudoku.py)."""
    from energyformer.experiment import load_run_config
    from energyformer.studies.runner import config_hash

    base = load_run_config("hyperset/sudoku_hyperset")
    assert config_hash(base) == config_hash(load_run_config("hyperset/sudoku_hyperset",
                                                            ["model.block.attention.beta_scale=1"]))
    assert config_hash(base) != config_hash(load_run_config("hyperset/sudoku_hyperset",
                                                            ["model.block.attention.beta_scale=-1"]))


class Numbers(ConfigModel):
    """Every numeric field shape the configs use (bools must not pass as numbers)."""

    steps: int = Field(1, ge=1)
    lr: float = Field(0.1, gt=0)
    maybe: int | None = None
    either: float | int = 1
    chunk: Literal[16, 32, 64] = 16
    group: Literal[1, 2, 4] | None = None
    scale: float | Literal["head_dim"] | None = None
    widths: list[int] = Field(default_factory=lambda: [8])
    pair: tuple[float, float] = (0.0, 1.0)
    size: int | tuple[int, int] = 3
    weights: dict[str, float] = Field(default_factory=dict)
    flag: bool = False
    flag_or_count: bool | int = 0
    anything: Any = None
    model: Model = Field(default_factory=Model)


@pytest.mark.parametrize("override, message", [
    ("steps=true", "steps = True: expected an integer, not a boolean"),
    ("steps=yes", "steps = True: expected an integer, not a boolean"),
    ("steps=off", "steps = False: expected an integer, not a boolean"),
    ("lr=true", "lr = True: expected a number, not a boolean"),
    ("maybe=on", "maybe = True: expected an integer, not a boolean"),
    ("either=true", "either = True: expected a number, not a boolean"),
    ("chunk=true", "chunk = True: expected one of 16, 32, 64, not a boolean"),
    ("group=true", "group = True: expected one of 1, 2, 4, not a boolean"),
    ("scale=false", "scale = False: expected a number or one of 'head_dim', not a boolean"),
    ("widths=[4, true]", "widths[1] = True: expected an integer, not a boolean"),
    ("pair=[false, 1.0]", "pair[0] = False: expected a number, not a boolean"),
    ("size=true", "size = True: expected an integer, not a boolean"),
    ("size=[2, no]", "size[1] = False: expected an integer, not a boolean"),
    ("weights={a: 1.0, b: yes}", "weights.b = True: expected a number, not a boolean"),
    ("model.dim=true", "model.dim = True: expected an integer, not a boolean"),
    ("model.widths=[true]", "model.widths[0] = True: expected an integer, not a boolean"),
    (["model.attention=cem", "model.attention.steps=true"],  # a kind section's own fields, too
     "model.attention.steps = True: expected an integer, not a boolean"),
])
def test_booleans_are_not_numbers(override, message):
    """YAML true/yes/on/false/no/off used to become 1 / 0 in integer and float fields without a word."""
    with pytest.raises(ConfigError) as info:
        load_config(Numbers, None, [override] if isinstance(override, str) else override)
    assert str(info.value) == message


def test_booleans_are_not_numbers_in_yaml_files_and_direct_construction(tmp_path):
    f = tmp_path / "n.yaml"
    f.write_text("steps: yes\n")
    with pytest.raises(ConfigError, match=r"^steps = True: expected an integer, not a boolean$"):
        load_config(Numbers, f)
    f.write_text("model: {attention: {kind: cem, lr: on}}\n")
    with pytest.raises(ConfigError, match=r"^model.attention.lr = True: expected a number, not a boolean$"):
        load_config(Numbers, f)
    with pytest.raises(ConfigError, match=r"^steps = True: expected an integer, not a boolean$"):
        CEM(steps=True)


def test_numbers_and_booleans_still_load_where_allowed():
    cfg = load_config(Numbers, None, [
        "steps=3", "lr=1e-3", "maybe=null", "either=2.5", "chunk=32", "group=4", "scale=head_dim",
        "widths=[1, 2]", "pair=[0, 2.5]", "size=[2, 3]", "weights={a: 1}", "flag=yes", "flag_or_count=true",
        "anything=true", "model.dim=1e3"])
    assert (cfg.steps, cfg.lr, cfg.maybe, cfg.either, cfg.chunk, cfg.group, cfg.scale) == (3, 1e-3, None, 2.5, 32, 4,
                                                                                            "head_dim")
    assert (cfg.widths, cfg.pair, cfg.size, cfg.weights) == ([1, 2], (0.0, 2.5), (2, 3), {"a": 1.0})
    assert cfg.flag is True and cfg.flag_or_count is True and cfg.anything is True and cfg.model.dim == 1000
    # what lax validation accepted before stays accepted: numeric strings and integral floats
    assert from_dict(Numbers, {"steps": "4", "lr": "0.5", "widths": ["2"], "model": {"dim": 8.0}}).steps == 4
    assert load_config(Numbers, None, ["flag=0", "flag_or_count=7"]).flag_or_count == 7
    assert load_config(Numbers).flag is False and Numbers(flag=True).flag is True


@pytest.mark.parametrize("override", ["model.attention=null", "model.attention=none", "model.attention=~"])
def test_null_kind_section_is_an_error_not_the_default_kind(override):
    """``attention: null`` used to select the default kind (a CEM model silently became Llama)."""
    with pytest.raises(ConfigError) as info:
        load_config(Run, {"model": {"attention": {"kind": "cem"}}}, [override])
    msg = str(info.value)
    assert msg == ("model.attention = None: expected a kind name or a mapping with 'kind', not null; "
                   "registered attention kinds: llama, cem"), msg
    with pytest.raises(ConfigError, match=r"^model.attention = None: expected a kind name .*, not null"):
        from_dict(Run, {"model": {"attention": None}})
    with pytest.raises(ConfigError, match=r"^model.attention = 3: expected a kind name or a mapping "
                                          r"with 'kind'; registered attention kinds: llama, cem$"):
        load_config(Run, None, ["model.attention=3"])
    # leaving the section out (or giving an empty mapping) still means the default kind
    assert load_config(Run, {"model": {}}).model.attention == Llama()
    assert load_config(Run, {"model": {"attention": {}}}).model.attention == Llama()


@pytest.mark.parametrize("overrides", [
    ["model.attention.kind=llama"], ["model.attention=llama"], ["model.attention={kind: llama}"],
    # the switch applies first whatever the order, and an override's own keys survive it
    ["model.attention.rope_theta=500", "model.attention.kind=llama"],
    ["model.attention.kind=llama", "model.attention.rope_theta=500"],
])
def test_an_override_that_switches_kind_drops_the_old_kinds_keys_as_base_does(overrides):
    """``--set a.kind=x`` on a section of another kind replaces it (the keys of one kind do not carry over to
    another, as under a config's ``base:``); it used to keep them and fail on the first key the new kind lacks
    (``train.schedule.kind=constant`` on a cosine schedule: unknown key final_lr_factor)."""
    data = {"model": {"attention": {"kind": "cem", "steps": 2, "diagonal": "none"}}}
    att = load_config(Run, data, overrides).model.attention
    assert isinstance(att, Llama)
    assert att.rope_theta == (500 if len(overrides) == 2 else 10000.0)


def test_none_in_an_override_is_the_choice_named_none_where_the_key_has_one_else_null():
    """`--set model.block.norm=none` gave null, which a sublayer's norm reads as its default (RMSNorm): a silent
    wrong config; `model.positions=none` and the like were refused though 'none' is among their choices"""
    assert load_config(Run, None, ["seed=none"]).seed is None and load_config(Run, None, ["seed=None"]).seed is None
    for over in (["model.attention=cem", "model.attention.diagonal=none"],
                 ["model.attention=cem", "model.attention.diagonal=NONE"]):
        att = load_config(Run, None, over).model.attention
        assert att.diagonal == "none" and type(att.diagonal) is str, over
    with pytest.raises(ConfigError, match="not null"):   # no attention kind is named none: null, refused
        load_config(Run, None, ["model.attention=none"])
    from energyformer.experiment import load_run_config

    for name, over, get in (
            ("gp/cem_t4", "model.block.norm=none", lambda c: c.model.block.norm.kind),
            ("gp/cem_t4", "model.block.norm.kind=none", lambda c: c.model.block.norm.kind),
            ("images/hyperset", "model.positions=none", lambda c: c.model.positions)):
        got = get(load_run_config(name, [over]))
        assert got == "none" and type(got) is str, (name, over, got)


def test_the_last_value_of_a_key_given_twice_wins_and_a_string_key_survives_a_later_switch():
    """`--set k=1 --set k=x`: the last value wins, and an invalid last value is its error — a string value (which
    the switch-first ordering may apply early) was applied before the number and then overwritten by it; and a
    string-valued key of a section keeps its value whether it comes before or after the section's switch"""
    assert load_config(Run, None, ["lr=0.5", "lr=0.25"]).lr == 0.25
    assert load_config(Run, None, ["name=a", "name=b"]).name == "b"
    with pytest.raises(ConfigError, match=r"^lr = 'abc'"):
        load_config(Run, None, ["lr=0.5", "lr=abc"])
    data = {"model": {"attention": {"kind": "llama"}}}
    for over in (["model.attention.diagonal=per_head", "model.attention=cem"],
                 ["model.attention=cem", "model.attention.diagonal=per_head"],
                 ["model.attention.diagonal=per_head", "model.attention.kind=cem"]):
        att = load_config(Run, data, over).model.attention
        assert isinstance(att, CEM) and att.diagonal == "per_head", over


def test_an_override_of_the_same_kind_keeps_the_sections_keys():
    data = {"model": {"attention": {"kind": "cem", "steps": 2, "diagonal": "none"}}}
    for over in (["model.attention.kind=cem"], ["model.attention={kind: cem, lr: 0.5}"]):
        att = load_config(Run, data, over).model.attention
        assert (att.steps, att.diagonal) == (2, "none")
    assert load_config(Run, data, ["model.attention={kind: cem, lr: 0.5}"]).model.attention.lr == 0.5
    # a section that names no kind holds the default kind's keys: nothing is dropped, unknown keys are named
    with pytest.raises(ConfigError, match="model.attention.steps"):
        load_config(Run, {"model": {"attention": {"steps": 2}}}, ["model.attention.kind=llama"])


@pytest.mark.parametrize("text, value", [("010", 10), ("0777", 777), ("0x1f", 31), ("0o17", 15), ("1_000", 1000),
                                         ("-5", -5), ("1:30", "1:30"), ("0b11", "0b11"), ("1e3", 1000.0)])
def test_numbers_read_as_yaml_1_2_in_overrides_and_files(text, value, tmp_path):
    """YAML 1.1 read ``--set model.dim=010`` as octal 8, ``0777`` as 511, ``1:30`` as base-60 90 and ``0b11`` as
    binary 3, in overrides and in config files alike; now integers are decimal and the others stay text."""
    from energyformer.utils.config import parse_value

    assert parse_value(text) == value and isinstance(parse_value(text), type(value))
    assert str(parse_value(text)) == text  # a number keeps the text typed (a text key gets it back)
    path = tmp_path / "c.yaml"
    path.write_text(f"model:\n  dim: {text}\n")
    assert read_yaml(path)["model"]["dim"] == value
    if isinstance(value, str):  # text where a number is wanted: refused by name
        with pytest.raises(ConfigError, match="model.dim"):
            load_config(Run, path)
    elif value > 0:
        assert load_config(Run, None, [f"model.dim={text}"]).model.dim == value


@pytest.mark.parametrize("override, message", [
    # a union's forms were reported as keys: "task.generate.givens.int = [30]: input should be a valid integer"
    ("task.generate.givens=[30]", "task.generate.givens = [30]: matches none of the forms this key takes (int: input "
                                  "should be a valid integer; tuple[int, int]: too few items (no item 2))"),
    # a fixed-length list given too few items was a "missing required key 'train.optimizer.betas[1]'"
    ("train.optimizer.betas=[0.9]", "train.optimizer.betas = [0.9]: too few items (no item 2; give all of them"),
    ("model.train_iterations=5", "model.train_iterations = 5: input should be a valid tuple (a list, e.g. [a, b])"),
    # a config-class form read "function-before[_number_is_fixed(), function-before[dispatch(), KindConfig]]: unknown
    # key for step size kind 'fixed'", naming neither the form nor the key
    ("model.block.attention.step_size.foo=1", "model.block.attention.step_size: matches none of the forms this key "
     "takes (literal['auto']: input should be 'auto'; a section {kind: ..., ...}: unknown key 'foo' for step size"),
])
def test_union_and_short_list_errors_name_the_key_itself(override, message):
    from energyformer.experiment import load_run_config

    base = ["task.kind=sudoku"] if override.startswith("task.generate") else []
    name = "intrinsic/mha" if "step_size" in override else None
    base += ["model.block.attention=mha_tied"] if name else []
    with pytest.raises(ConfigError) as err:
        load_run_config(name, base + [override])
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_the_list_keys_notation_can_be_pasted_into_an_override():
    """``list keys`` prints ``model.attention[kind=cem].steps``; as an override it selects the kind and sets the key
    (it was "unknown key 'model.attention[kind'")."""
    cfg = load_config(Run, None, ["model.attention[kind=cem].steps=5"])
    assert isinstance(cfg.model.attention, CEM) and cfg.model.attention.steps == 5
    # the value may hold '=' and the selector applies before other overrides of the section
    assert load_config(Run, None, ["name=a=b"]).name == "a=b"
    cfg = load_config(Run, {"model": {"attention": {"kind": "cem", "lr": 0.5}}},
                      ["model.attention.rope_theta=7", "model.attention[kind=llama].rope_theta=9"])
    assert isinstance(cfg.model.attention, Llama) and cfg.model.attention.rope_theta == 9


def test_a_key_under_a_default_value_names_the_value():
    """``--set train.steps.x=1`` where the config leaves steps at its default said 'train.steps: input should be a
    valid integer' (the user gave the integer 1); now as where a config file sets the key: a value, not a section."""
    from energyformer.experiment import load_run_config

    for key, value in (("train.steps.x", "1"), ("train.optimizer.betas.0", "0.5")):
        with pytest.raises(ConfigError, match=rf"^unknown key '{re.escape(key)}': "
                                              rf"'{re.escape(key.rsplit('.', 1)[0])}' is a value, not a section$"):
            load_run_config("lm/llama", [f"{key}={value}"])
