"""TrainConfig: layout, defaults, kind dispatch, and one-line errors naming key, value and what is allowed."""

from __future__ import annotations

import pytest

from energyformer.train import OPTIMIZERS, TrainConfig
from energyformer.train.roles import DEFAULT_NO_DECAY_ROLES, ROLES
from energyformer.utils.config import load_config
from energyformer.utils.config_help import format_config_help
from energyformer.utils.validate import ConfigError


def test_defaults_and_layout():
    cfg = TrainConfig(steps=200)
    assert (cfg.lr, cfg.grad_clip) == (2e-3, 1.0)
    opt, sched = cfg.optimizer, cfg.schedule
    assert (opt.kind, opt.betas, opt.eps, opt.weight_decay, opt.fused) == ("adamw", (0.9, 0.95), 1e-9, 0.1, None)
    assert (sched.kind, sched.warmup, sched.final_lr_factor) == ("warmup_cosine", 0.05, 0.1)
    assert sched.warmup_steps(cfg.steps) == 10
    assert cfg.no_decay_roles == [r for r in ROLES if r != "weight"] == list(DEFAULT_NO_DECAY_ROLES)
    assert cfg.lr_multipliers == {}
    d = cfg.to_dict()
    assert d["optimizer"] == {"kind": "adamw", "betas": [0.9, 0.95], "eps": 1e-9, "weight_decay": 0.1,
                              "fused": None}
    assert TrainConfig.from_dict(d) == cfg  # to_dict / from_dict round trip


def test_each_kind_has_its_own_keys_and_defaults():
    assert TrainConfig(optimizer="adam").optimizer.model_dump() == {
        "kind": "adam", "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "fused": None}
    sgd = TrainConfig(optimizer={"kind": "sgd", "momentum": 0.9, "nesterov": True}).optimizer
    assert (sgd.momentum, sgd.nesterov, sgd.weight_decay) == (0.9, True, 0.0)
    assert TrainConfig(optimizer={"betas": [0.8, 0.9]}).optimizer.betas == (0.8, 0.9)  # kind defaults to adamw
    assert TrainConfig(schedule="constant").schedule.warmup == 0.0


def test_dotted_overrides_switch_kinds():
    cfg = load_config(TrainConfig, {"optimizer": {"kind": "adamw", "eps": 1e-6}},
                      ["optimizer=sgd", "optimizer.momentum=0.9", "schedule.kind=warmup_linear",
                       "schedule.final_lr_factor=0.0", "lr_multipliers.step_size=0.1"])
    assert cfg.optimizer.kind == "sgd" and cfg.optimizer.momentum == 0.9
    assert cfg.schedule.kind == "warmup_linear" and cfg.lr_multipliers == {"step_size": 0.1}


def test_help_lists_the_keys_of_every_kind():
    text = format_config_help(TrainConfig)
    for key in ("optimizer.kind", "optimizer[kind=sgd].nesterov", "optimizer[kind=adam].betas",
                "schedule[kind=warmup_linear].final_lr_factor", "no_decay_roles", "lr_multipliers"):
        assert key in text, key


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"precision": "fp16"}, ["precision = 'fp16'", "'fp32' or 'bf16'"]),
        ({"steps": 0}, ["steps = 0", "greater than or equal to 1"]),
        ({"lr": 0.0}, ["lr = 0.0", "greater than 0"]),
        ({"grad_accum": 2.5}, ["grad_accum = 2.5", "integer"]),
        ({"device": "gpu"}, ["device = 'gpu'", "'cuda:N'"]),
        ({"compile": "maybe"}, ["compile = 'maybe'", "false, true or a torch.compile mode", "'reduce-overhead'"]),
        ({"compile": "reduce_overhead"}, ["did you mean 'reduce-overhead'"]),
        ({"optimizer": {"betas": [0.9, 1.0]}}, ["betas = [0.9, 1.0]", "in [0, 1)"]),
        ({"optimizer": {"kind": "sgd", "nesterov": True}}, ["nesterov = True", "momentum > 0"]),
        ({"optimizer": {"kind": "sgd", "momentum": 1.0}}, ["momentum = 1.0", "less than 1"]),
        ({"schedule": {"warmup": 1.5}}, ["warmup = 1.5", "less than or equal to 1"]),
        ({"no_decay_roles": ["norm", "nrom"]}, ["no_decay_roles[1] = 'nrom'", "did you mean 'norm'",
                                                "'precond'"]),
        ({"no_decay_roles": ["bias", "bias"]}, ["'bias' more than once"]),
        ({"lr_multipliers": {"bais": 2.0}}, ["'bais' is not a parameter role", "did you mean 'bias'",
                                             "roles: weight, embedding"]),
        ({"lr_multipliers": {"norm": -1.0}}, ["lr_multipliers", "must be >= 0"]),
    ],
)
def test_errors_name_key_value_and_allowed(kwargs, fragments):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**kwargs)
    msg = str(e.value)
    assert "\n" not in msg
    for frag in fragments:
        assert frag in msg, (frag, msg)


@pytest.mark.parametrize("section, bad, registered", [
    ("optimizer", "lion", "registered: adamw, adam, sgd"),
    ("schedule", "cosine", "registered: warmup_cosine, warmup_linear, constant"),
])
def test_unknown_kind_is_one_line_listing_the_registered_ones(section, bad, registered):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**{section: {"kind": bad}})
    msg = str(e.value)
    assert "\n" not in msg and f"{section}.kind = {bad!r}" in msg and registered in msg
    assert OPTIMIZERS.names() == ["adamw", "adam", "sgd"]


def test_key_of_another_kind_says_which_kinds_take_it():
    with pytest.raises(ConfigError, match=r"unknown key 'optimizer.betas' for optimizer kind 'sgd'; "
                                          r"kinds that accept it: adamw, adam"):
        TrainConfig(optimizer={"kind": "sgd", "betas": [0.9, 0.99]})
    with pytest.raises(ConfigError, match=r"unknown key 'schedule.final_lr_factor' for schedule kind "
                                          r"'constant'"):
        TrainConfig(schedule={"kind": "constant", "final_lr_factor": 0.1})


@pytest.mark.parametrize("old, new", [("betas", "optimizer.betas"), ("eps", "optimizer.eps"),
                                      ("weight_decay", "optimizer.weight_decay"),
                                      ("warmup", "schedule.warmup"),
                                      ("final_lr_factor", "schedule.final_lr_factor")])
def test_keys_of_the_previous_layout_say_where_they_moved(old, new):
    with pytest.raises(ConfigError, match=rf"key '{old}' moved to '{new}'"):
        TrainConfig.from_dict({old: 0.1})


def test_unknown_key_has_a_hint():
    with pytest.raises(ConfigError, match=r"unknown key 'stpes' \(did you mean 'steps'\?\)"):
        TrainConfig.from_dict({"stpes": 3})


def test_a_learning_rate_beyond_float32_is_a_config_error():
    """lr = 1e300 trained until the optimiser's first step raised an internal overflow error"""
    with pytest.raises(ConfigError, match=r"^lr = 1e\+?300: must be at most 3e38 \(it is applied as a float32 scalar\)"):
        load_config(TrainConfig, None, ["lr=1e300"])
    assert load_config(TrainConfig, None, ["lr=1e30"]).lr == 1e30
